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

The layer (torch) is in ``attnbench.plugins.attention.future_model``, the options in
``future_options``; this module holds the analytic sizes and the registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.attention import softmax
from attnbench.plugins.attention.future_options import FutureOptions, options_of

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.attention.softmax_model import SoftmaxAttention

# ----------------------------------------------------------------------------- registration


def build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    # torch loads with the model, not the registration
    from attnbench.plugins.attention.future_model import FutureAttention
    from attnbench.plugins.attention.softmax_model import SoftmaxAttention

    opts = options_of(config)
    if opts.is_future_layer(layer_idx, config.n_layer):
        return FutureAttention(config, layer_idx)
    return SoftmaxAttention(config, layer_idx)


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


def attention_maps(mixer: SoftmaxAttention, x: torch.Tensor) -> torch.Tensor:
    """The causal part of P (6.3) for future layers, plain softmax weights for the others:
    (B, H, T, T)."""
    from attnbench.plugins.attention import future_model

    return future_model.attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="future",
            build_mixer=build_mixer,
            description="Future attention (yiphei): learned future K/V band + auxiliary "
            "future-attention loss; lean blocked LSE kernels, KV-cache decoding",
            options=FutureOptions,
            decode="kv_cache",
            state_size=state_size,
            flops_per_token=flops_per_token,
            aux_loss=True,
            version="1",
            attention_maps=attention_maps,
        )
    )
