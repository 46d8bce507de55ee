"""Future attention (yiphei/yif-AI): causal softmax plus learned future keys and values.

Spec: variants.md section 6. Per head, row i at absolute position i, C = context,
fd = future_dim, s = 1/sqrt(h); K_future (H, h, C-1), V_future (H, C-1, h), column c
standing for absolute position c + 1:

    O[i, j] = s q_i.k_j                 for j <= i                      (true keys)
    O[i, j] = s q_i.K_future[:, j-1]    for i < j <= min(i + fd, C - 1) (learned band)
    P = softmax_j(O);  y_i = sum_{j<=i} P_ij v_j + sum_{band} P_ij V_future[j-1]   (6.3)

In training the future part is pulled towards the true masked attention (6.4):

    P*_i = softmax_{j <= min(i+fd, T-1)}(s q_i.k_j);  out*_i = sum_{i<j<=min(i+fd,T-1)} P*_ij v_j
    loss = MSE(out_future, out*)  or  mean (1 - cos(out_future, out*)) / 2

Lean path (instead of the explicit (T, T+fd) matrices of the reference, kept in
``tests/references/future_reference.py`` for tests and benchmarks only; the kernels are in
``kernels/lse_merge.py``):

* causal part: ``_CausalAttentionLSE``, a flash-style kernel in plain PyTorch that returns
  the causal output *and* its log-sum-exp, with a recomputing backward. We do not use SDPA
  because no public SDPA returns the LSE, and the LSE must carry gradient (it weights the
  two parts); a separate differentiable LSE would need its own (T, T) probabilities for
  backward. Memory: one block of scores, about SCORE_BLOCK_ELEMENTS, at any moment.
* future band: row i needs at most fd columns. Rows are cut into blocks of ``blk``; block b
  sees one window of ``blk + fd - 1`` columns (an ``unfold`` view), so scores are
  (T, blk + fd - 1): O(T * fd).
* the two parts are joined through log-sum-exps (6.6).
* target: the band of the *true* scores is also O(T * fd), and the causal LSE is already
  known, so out* = sum_band exp(s q_i.k_j - lse_full_i) v_j with
  lse_full = logaddexp(lse_causal, lse_true_band). No second full attention pass is needed.

Decoding: a preallocated KV cache plus the absolute position; each step attends to the
cache and to the parameter slice of positions i+1..min(i+fd, C-1), through the same code.

The layer (torch) is in ``attnbench.plugins.attention.future_model``; this module holds the
options, the analytic sizes and the registration.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.attention import softmax

MODEL = "attnbench.plugins.attention.future_model"  # torch: imported when the first mixer is built

AUX_NAME = "future_attn"
DEFAULT_FUTURE_DIM = 50  # the published run's future_dim (variants.md 6.7)


@dataclass(frozen=True)
class FutureOptions:
    """Knobs of future attention (reference names in brackets).

    future_dim: learned future slots per row [future_dim]; in [1, context - 1], checked
        when the model is built. None (default) means min(50, context - 1): 50 as in the
        published run; the reference's default, context - 1, makes the band as wide as
        the causal part.
    start_layer, end_layer: 1-indexed, inclusive range of future layers; end_layer None
        means the last layer. Other layers are plain causal softmax attention.
    loss_type: "mse" or "cosine" [future_attn_loss_type MSE / COSINE].
    loss_coeff: weight of the layer-averaged auxiliary loss, > 0 [future_attn_loss_coeff].
    detach_target: stop gradients through the true-attention target
        [detach_future_ground_truth].
    use_future_attn_loss: add the auxiliary loss in training [use_future_attn_loss].
    """

    future_dim: int | None = None
    start_layer: int = 1
    end_layer: int | None = None
    loss_type: Literal["mse", "cosine"] = "mse"
    loss_coeff: float = 1.0
    detach_target: bool = True
    use_future_attn_loss: bool = True

    def __post_init__(self) -> None:
        for name in ("future_dim", "start_layer"):
            value = getattr(self, name)
            if value is None and name == "future_dim":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        end = self.end_layer
        if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < self.start_layer):
            raise ValueError(f"end_layer must be None or an integer >= start_layer ({self.start_layer}), got {end!r}")
        if self.loss_type not in ("mse", "cosine"):
            raise ValueError(f"loss_type must be 'mse' or 'cosine', got {self.loss_type!r}")
        coeff = self.loss_coeff
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 < coeff < math.inf:
            raise ValueError(f"loss_coeff must be a finite number > 0, got {coeff!r}")
        for name in ("detach_target", "use_future_attn_loss"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def fd(self) -> int:
        """future_dim once resolved (``checked`` resolves it; the mixer holds checked options)."""
        if self.future_dim is None:
            raise ValueError("future_dim is not resolved yet: use FutureOptions.checked(config)")
        return self.future_dim

    def checked(self, config: ModelConfig) -> FutureOptions:
        """These options validated against the model shape, future_dim resolved; raises
        ValueError."""
        if self.future_dim is None:
            fd = min(DEFAULT_FUTURE_DIM, config.context - 1)
            return dataclasses.replace(self, future_dim=fd).checked(config)
        if not 1 <= self.future_dim <= config.context - 1:
            raise ValueError(
                f"future_dim must be in [1, context - 1] = [1, {config.context - 1}], got {self.future_dim}"
            )
        if max(self.start_layer, self.end_layer or 1) > config.n_layer:
            raise ValueError(
                f"start_layer/end_layer ({self.start_layer}, {self.end_layer}) must be within "
                f"1..n_layer = 1..{config.n_layer}"
            )
        return self

    def is_future_layer(self, layer_idx: int, n_layer: int) -> bool:
        """layer_idx is 0-based; the range is 1-based inclusive."""
        return self.start_layer <= layer_idx + 1 <= (self.end_layer or n_layer)


def options_of(config: ModelConfig) -> FutureOptions:
    """The config's options checked against its shape, future_dim resolved; raises ValueError."""
    opts = config.options if config.options is not None else FutureOptions()
    if not isinstance(opts, FutureOptions):
        raise ValueError(f"config.options must be FutureOptions, got {type(opts).__name__}")
    return opts.checked(config)


# ----------------------------------------------------------------------------- registration


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return 2 * T * config.d_model  # K and V cache; K_future/V_future are parameters


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    base = softmax.flops_per_token(config, layer_idx, T)  # projections + causal part
    opts = options_of(config)
    if not opts.is_future_layer(layer_idx, config.n_layer):
        return base
    fd, C = opts.fd, config.context
    band = sum(max(0, min(fd, C - 1 - i)) for i in range(T)) / max(T, 1)  # mean band width
    return base + 2.0 * 2 * config.d_model * band  # band scores and band mixing (inference)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="future",
            build_mixer=f"{MODEL}:build_mixer",
            description="Future attention (yiphei): learned future K/V band + auxiliary "
            "future-attention loss; lean blocked LSE kernels, KV-cache decoding",
            options=FutureOptions,
            decode="kv_cache",
            state_size=state_size,
            flops_per_token=flops_per_token,
            aux_loss=True,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
