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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import AuxLoss, MixerOutput, ModelConfig, Variant, hookimpl
from attnbench.plugins import softmax
from attnbench.plugins.kernels.lse_merge import band_attend, band_scores, causal_attention_lse, fp32
from attnbench.plugins.softmax import KVCache, SoftmaxAttention

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


def _options(config: ModelConfig) -> FutureOptions:
    opts = config.options if config.options is not None else FutureOptions()
    if not isinstance(opts, FutureOptions):
        raise ValueError(f"config.options must be FutureOptions, got {type(opts).__name__}")
    return opts.checked(config)


def future_loss(out_future: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """() MSE over all (B, H, T, h) elements, or mean over (B, H, T) of (1 - cos) / 2."""
    if loss_type == "mse":
        return F.mse_loss(out_future, target)
    return ((1.0 - F.cosine_similarity(out_future, target, dim=-1)) / 2).mean()


class FutureAttention(SoftmaxAttention):
    """Future attention layer (equations 6.3, 6.4 above); QKV/output as the softmax layer."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.opts = _options(config)
        self.context = config.context
        H, h, C = config.n_head, config.head_dim, config.context
        self.k_future = nn.Parameter(torch.empty(H, h, C - 1))  # column c: position c + 1
        self.v_future = nn.Parameter(torch.empty(H, C - 1, h))
        # With bias on, the reference's future K/V projections carry biases too (zeros at
        # init): b_k per future position, added to q . K_future before the 1/sqrt(h), and
        # b_v added to every row's future output.
        self.k_future_bias = nn.Parameter(torch.zeros(H, 1, C - 1)) if config.bias else None
        self.v_future_bias = nn.Parameter(torch.zeros(H, 1, h)) if config.bias else None
        self.init_weights()

    def length_limit(self) -> tuple[int, str]:
        C = self.context
        return C, f"future attention's learned future keys and values are laid out for context {C}"

    def init_weights(self) -> None:
        nn.init.normal_(self.k_future, mean=0.0, std=0.02)
        nn.init.normal_(self.v_future, mean=0.0, std=0.02)

    def _future_keys(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q', K') with band score (q . K_future + b_k) / sqrt(h) = q' . K' / sqrt(h'), the
        scaling band_scores applies: (B, H, T, h'), (H, h', C-1) in fp32; h' = h + 1 with the
        bias folded in as one more product term, else h. The forward and the maps use it."""
        q_f, k_f = fp32(q), fp32(self.k_future)  # (B, H, T, h), (H, h, C-1)
        if self.k_future_bias is not None:
            r = math.sqrt((q.size(-1) + 1) / q.size(-1))  # sqrt(h+1)/sqrt(h): undoes the wider scaling
            q_f = torch.cat([q_f * r, torch.full_like(q_f[..., :1], r)], dim=-1)  # (B, H, T, h+1)
            k_f = torch.cat([k_f, fp32(self.k_future_bias)], dim=1)  # (H, h+1, C-1)
        return q_f, k_f

    def _attend(self, q, k, v, offset: int, dropout_p: float):
        """Attention core in fp32: (y, out_future, lse_causal), each (B, H, T, ...)."""
        seed = int(torch.randint(0, 2**62, ())) if dropout_p > 0 else 0
        out_c, lse_c = causal_attention_lse(q, k, v, offset, dropout_p, seed)
        # out_c (B, H, T, h), lse_c (B, H, T)
        q_f, k_f = self._future_keys(q)  # (B, H, T, h'), (H, h', C-1)
        s, vw = band_scores(
            q_f,
            k_f,
            fp32(self.v_future).transpose(1, 2),
            first_pos=1,
            offset=offset,
            last=self.context - 1,
            fd=self.opts.fd,
        )  # s (B, H, nb, blk, W), vw (H, nb, W, h)
        out_f, lse_all = band_attend(s, vw, lse_c, q.size(2), dropout_p)  # (B, H, T, h), (B, H, T)
        if self.v_future_bias is not None:
            out_f = out_f + fp32(self.v_future_bias)[None]  # (B, H, T, h) every row, as the reference
        y = torch.exp(lse_c - lse_all)[..., None] * out_c + out_f  # (B, H, T, h)
        return y, out_f, lse_c

    def _target(self, q, k, v, lse_c) -> torch.Tensor:
        """out* (B, H, T, h): true attention over j <= min(i+fd, T-1), band part only (6.4)."""
        T = q.size(2)
        s, vw = band_scores(
            q, k.transpose(-1, -2), v.transpose(-1, -2), first_pos=0, offset=0, last=T - 1, fd=self.opts.fd
        )
        # s (B, H, nb, blk, W) true band scores, vw (B, H, nb, W, h) true band values
        return band_attend(s, vw, lse_c, T)[0]  # (B, H, T, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor | MixerOutput:
        T = x.size(1)
        if self.context < T:
            raise ValueError(f"sequence of {T} positions exceeds the context {self.context}")
        q, k, v = self._heads(x)  # (B, H, T, h)
        dropout_p = self.dropout if self.training else 0.0
        # exp / log-sum-exp need fp32: the core runs with autocast off on fp32 copies.
        with torch.autocast(x.device.type, enabled=False):
            q, k, v = fp32(q), fp32(k), fp32(v)  # (B, H, T, h)
            y, out_f, lse_c = self._attend(q, k, v, 0, dropout_p)  # (B, H, T, h)
            aux = None
            if self.training and self.opts.use_future_attn_loss:
                if self.opts.detach_target:
                    with torch.no_grad():
                        target = self._target(q, k, v, lse_c)  # (B, H, T, h)
                else:
                    target = self._target(q, k, v, lse_c)  # (B, H, T, h)
                aux = future_loss(out_f, target, self.opts.loss_type)  # ()
        y = self._merge(y.to(x.dtype))  # (B, T, D)
        if aux is None:
            return y
        return MixerOutput(y, (AuxLoss(AUX_NAME, aux, float(self.opts.loss_coeff)),))

    def step(self, x: torch.Tensor, state: KVCache) -> tuple[torch.Tensor, KVCache]:
        q, k, v = self._heads(x)  # (B, H, t, h)
        start, end = state.length, state.length + x.size(1)
        if end > state.k.size(2) or end > self.context:
            raise ValueError(f"KV cache holds {state.k.size(2)} positions (context {self.context}); step needs {end}")
        # Write the new keys/values into the preallocated slots [start, end).
        state.k[:, :, start:end] = k.to(state.k.dtype)
        state.v[:, :, start:end] = v.to(state.v.dtype)
        keys, values = fp32(state.k[:, :, :end]), fp32(state.v[:, :, :end])  # (B, H, end, h)
        with torch.autocast(x.device.type, enabled=False):
            y = self._attend(fp32(q), keys, values, start, 0.0)[0]  # (B, H, t, h)
        return self._merge(y.to(x.dtype)), KVCache(state.k, state.v, end)


# ----------------------------------------------------------------------------- registration


def build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    opts = _options(config)
    if opts.is_future_layer(layer_idx, config.n_layer):
        return FutureAttention(config, layer_idx)
    return SoftmaxAttention(config, layer_idx)


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return 2 * T * config.d_model  # K and V cache; K_future/V_future are parameters


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    base = softmax.flops_per_token(config, layer_idx, T)  # projections + causal part
    opts = _options(config)
    if not opts.is_future_layer(layer_idx, config.n_layer):
        return base
    fd, C = opts.fd, config.context
    band = sum(max(0, min(fd, C - 1 - i)) for i in range(T)) / max(T, 1)  # mean band width
    return base + 2.0 * 2 * config.d_model * band  # band scores and band mixing (inference)


@torch.no_grad()
def attention_maps(mixer: SoftmaxAttention, x: torch.Tensor) -> torch.Tensor:
    """The causal part of P (6.3): softmax over true keys j <= i and the learned band
    i < j <= min(i + fd, C - 1), columns j <= i kept (rows sum to 1 minus the band's
    share): (B, H, T, T). Softmax layers of the model give their plain weights."""
    causal = softmax.attention_maps(mixer, x)  # (B, H, T, T)
    if not isinstance(mixer, FutureAttention):
        return causal
    q, k, _ = mixer._heads(x)  # (B, H, T, h)
    T, C, fd = q.size(2), mixer.context, mixer.opts.fd
    true = (q.float() @ k.float().transpose(-1, -2)) * q.size(-1) ** -0.5  # (B, H, T, T)
    q_f, k_f = mixer._future_keys(q)  # (B, H, T, h'), (H, h', C-1): the forward's band scores
    band = (q_f @ k_f) * q_f.size(-1) ** -0.5  # (B, H, T, C-1) column c: position c+1, b_k included
    i = torch.arange(T, device=x.device)[:, None]  # (T, 1)
    pos = torch.arange(1, C, device=x.device)[None, :]  # (1, C-1)
    j = torch.arange(T, device=x.device)[None, :]  # (1, T)
    true = true.masked_fill(j > i, float("-inf"))  # (B, H, T, T)
    band = band.masked_fill((pos <= i) | (pos > torch.clamp(i + fd, max=C - 1)), float("-inf"))  # (B, H, T, C-1)
    return torch.cat([true, band], -1).softmax(-1)[..., :T]  # (B, H, T, T) causal columns


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
