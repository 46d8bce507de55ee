"""Future attention's layer (torch): the equations, options and registration are in
``attnbench.plugins.attention.future``; the lean kernels are in ``kernels/lse_merge.py``.

Two paths compute the training (and inference) forward, the same equations (6.3, 6.4):
* dense, when all of a forward's scores take no more memory than one query block of the
  lean causal kernel (``lse_merge.SCORE_BLOCK_ELEMENTS``; the CPU suites' T <= 64 and the
  speed experiment's T = 256 at batch 1) and dropout is off: the true scores (T, T) and
  the learned band's (T, P), P = min(C - 1, T - 1 + fd) future positions, masked side by
  side, one softmax, two matmuls; the target from the same true scores; autograd's
  backward. A dozen small operations where the lean path runs some sixty: at quick's
  shapes the layer's step takes about half the time.
* lean (``_attend``): the blocked kernels, O(T fd) memory beside one block of causal scores,
  for longer sequences, dropout, and decoding (``step``).
``describe_path`` names the one the last forward took.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import AuxLoss, MixerOutput, ModelConfig
from attnbench.plugins.attention import softmax_model
from attnbench.plugins.attention.future import AUX_NAME, options_of
from attnbench.plugins.attention.softmax_model import KVCache, SoftmaxAttention
from attnbench.plugins.kernels import lse_merge
from attnbench.plugins.kernels.lse_merge import band_attend, band_scores, causal_attention_lse, fp32

DENSE_KERNEL = "future_model.dense"
LEAN_KERNEL = "lse_merge.causal_attention_lse+band_attend"


class DenseMasks(NamedTuple):
    """Where the dense path's scores are -inf or dropped, per (T, P, fd): (T, T + P) for
    [true | band] (column T + c: position c + 1), (T, T) for the target's true scores."""

    scores: torch.Tensor  # (T, T + P) True where j > i (true) or outside i < c + 1 <= i + fd (band)
    beyond: torch.Tensor  # (T, T) True where j > i + fd: outside the target's softmax
    seen: torch.Tensor  # (T, T) True where j <= i: not in the target's band


@functools.lru_cache(maxsize=32)
def dense_masks(T: int, P: int, fd: int, device: torch.device) -> DenseMasks:
    i = torch.arange(T, device=device)[:, None]  # (T, 1)
    j = torch.arange(T, device=device)[None, :]  # (1, T)
    c = torch.arange(P, device=device)[None, :]  # (1, P) column c: position c + 1
    band_out = (c < i) | (c >= i + fd)  # (T, P) position c + 1 outside i+1 .. i+fd
    return DenseMasks(torch.cat([j > i, band_out], dim=1), j > i + fd, j <= i)


def future_loss(out_future: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """() MSE over all (B, H, T, h) elements, or mean over (B, H, T) of (1 - cos) / 2."""
    if loss_type == "mse":
        return F.mse_loss(out_future, target)
    return ((1.0 - F.cosine_similarity(out_future, target, dim=-1)) / 2).mean()


class FutureAttention(SoftmaxAttention):
    """Future attention layer (equations 6.3, 6.4 in ``future``); QKV/output as the softmax layer."""

    dense_path = True  # False: every forward runs the lean kernels (A/B benchmarks, tests)

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.opts = options_of(config)
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
        self.last_kernel: str | None = None  # the last forward's path, for describe_path

    def describe_path(self) -> dict[str, object]:
        """What runs: recorded with every speed figure (the module docstring says when the
        dense path runs)."""
        return {
            "kernel": self.last_kernel or f"{DENSE_KERNEL} (scores within one block, no dropout), else {LEAN_KERNEL}",
            "decode_kernel": LEAN_KERNEL,
            "future_dim": self.opts.fd,
        }

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

    def _band_columns(self, T: int) -> int:
        """P: the learned future positions 1..P some row of a T-token forward sees."""
        return min(self.context - 1, T - 1 + self.opts.fd)

    def _dense_fits(self, q: torch.Tensor) -> bool:
        """Whether a forward's [true | band] scores, (B, H, T, T + P), fit one block of the
        lean causal kernel's scores (read at call time: tests shrink the blocks)."""
        B, H, T, _ = q.shape
        return B * H * T * (T + self._band_columns(T)) <= lse_merge.SCORE_BLOCK_ELEMENTS

    def _attend_dense(self, q, k, v):
        """The dense path of 6.3, offset 0, no dropout: (y, out_future, a), a (B, H, T, T)
        the scaled true scores, which the target reuses; fp32 q, k, v (B, H, T, h)."""
        T, h = q.size(2), q.size(-1)
        P, scale = self._band_columns(T), 1.0 / math.sqrt(h)
        a = (q @ k.transpose(-1, -2)) * scale  # (B, H, T, T)
        f = q @ fp32(self.k_future[:, :, :P])  # (B, H, T, P) column c: position c + 1
        if self.k_future_bias is not None:
            f = f + fp32(self.k_future_bias[:, :, :P])  # (B, H, T, P) b_k before the scale, as the reference
        masks = dense_masks(T, P, self.opts.fd, q.device)
        p = torch.cat([a, f * scale], dim=-1).masked_fill(masks.scores, float("-inf")).softmax(-1)  # (B, H, T, T+P)
        out_f = p[..., T:] @ fp32(self.v_future[:, :P])  # (B, H, T, h)
        if self.v_future_bias is not None:
            out_f = out_f + fp32(self.v_future_bias)[None]  # (B, H, T, h) every row, as the reference
        return p[..., :T] @ v + out_f, out_f, a  # (B, H, T, h) y, out_future; (B, H, T, T)

    def _target_dense(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """out* (6.4) from the dense path's true scores a (B, H, T, T): (B, H, T, h)."""
        masks = dense_masks(a.size(-1), self._band_columns(a.size(-1)), self.opts.fd, a.device)
        p_true = a.masked_fill(masks.beyond, float("-inf")).softmax(-1)  # (B, H, T, T) j <= min(i + fd, T - 1)
        return p_true.masked_fill(masks.seen, 0.0) @ v  # (B, H, T, h) the band i < j <= i + fd

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
            if dropout_p == 0.0 and self.dense_path and self._dense_fits(q):
                self.last_kernel = DENSE_KERNEL
                y, out_f, a = self._attend_dense(q, k, v)  # (B, H, T, h) x 2, (B, H, T, T)
                target_of = functools.partial(self._target_dense, a, v)
            else:
                self.last_kernel = LEAN_KERNEL
                y, out_f, lse_c = self._attend(q, k, v, 0, dropout_p)  # (B, H, T, h)
                target_of = functools.partial(self._target, q, k, v, lse_c)
            aux = None
            if self.training and self.opts.use_future_attn_loss:
                if self.opts.detach_target:
                    with torch.no_grad():
                        target = target_of()  # (B, H, T, h)
                else:
                    target = target_of()  # (B, H, T, h)
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


def build_mixer(config: ModelConfig, layer_idx: int) -> SoftmaxAttention:
    """The variant's mixer: future attention in the options' layer range, softmax elsewhere."""
    if options_of(config).is_future_layer(layer_idx, config.n_layer):
        return FutureAttention(config, layer_idx)
    return SoftmaxAttention(config, layer_idx)


@torch.no_grad()
def attention_maps(mixer: SoftmaxAttention, x: torch.Tensor) -> torch.Tensor:
    """The causal part of P (6.3): softmax over true keys j <= i and the learned band
    i < j <= min(i + fd, C - 1), columns j <= i kept (rows sum to 1 minus the band's
    share): (B, H, T, T). Softmax layers of the model give their plain weights."""
    causal = softmax_model.attention_maps(mixer, x)  # (B, H, T, T)
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
