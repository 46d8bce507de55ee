"""Deliberately broken variants, each wrong in exactly one way, to show the trust gate
catches it with the right check. Load in-process:

    get_plugin_manager(extra_plugins=[("broken", broken_variants)], entry_points=False)

variant           what is wrong                                       caught by
leaky             the mask lets position t see t+1                    both leak checks
grad_leaky        + x[t+1] - x[t+1].detach(): 0 in value, not in grad  leak backward
own_model_leaky   correct mixer; its own model uses `leaky` mixers     leak forward
drifty            step keeps its token count in bf16 (exact to 256)   incremental
overflowy         softmax as exp(s) / sum exp(s), no max-subtraction  finite
nondeterministic  output gains drawn from Python's unseeded `random`  deterministic
wrong_state_size  declares K only, holds K and V                      declared facts
overstated_state  declares 4x the K and V it holds                     declared facts
undeclared_aux    returns an auxiliary loss but declares aux_loss=False declared facts
bad_shape         returns (B, T, D/2)                                 error (every forward)
bad_dtype         returns float64 for a float32 input                 error (every forward)
raises            its builder raises                                  error (every check)
hangs             forward blocks until RELEASE is set                 error: timed out
chunk_normalised  softmax stabilised by one max per 64-row chunk taken  leak at scale
                  over all its scores, later positions included: exact
                  at init, leaks once logits outgrow exp's range
leaks_past_400    causal up to T = 400; longer, query t also sees t+1  both leak checks, only at
                                                                      an experiment length > 400
coarse_grad       exact outputs; its backward rounds the gradient      grad_float64_at_scale
                  to bf16 (a half-precision custom backward)
raises_from       its builder raises a RuntimeError from a ValueError  error, cause kept (every
                  (an option it cannot build with)                    check)
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import torch
from torch import nn

from attnbench import AuxLoss, Backbone, MixerOutput, ModelConfig, Variant, hookimpl, mark_residual

RELEASE = threading.Event()  # tests set this to let `hangs` return


class MaskedAttention(nn.Module):
    """Plain softmax attention with an explicit mask:  y = softmax(Q K^T / sqrt(h) + M) V W_o.

    ``diagonal`` is the last key offset a query may see (0 = causal). Subclasses break one
    thing each; everything else is the correct textbook computation.
    """

    diagonal = 0

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def heads(self, z: torch.Tensor) -> torch.Tensor:
        B, T, D = z.shape
        return z.view(B, T, self.n_head, D // self.n_head).transpose(1, 2)  # (B, H, T, h)

    def scores(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T, D = x.shape[1:]
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, T, h)
        s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5  # (B, H, T, T)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(self.diagonal)  # (T, T)
        return s.float().masked_fill(~keep, float("-inf")), v  # fp32 logits: (B, H, T, T)

    def softmax(self, s: torch.Tensor) -> torch.Tensor:
        return torch.softmax(s, dim=-1)  # (B, H, T, T) max-subtracted by torch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        s, v = self.scores(x)  # (B, H, T, T), (B, H, T, h)
        y = self.softmax(s).to(v.dtype) @ v  # (B, H, T, h)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D)


class Leaky(MaskedAttention):
    """Broken: the mask is ``tril(1)``, so query t also sees key t+1."""

    diagonal = 1


class GradLeaky(MaskedAttention):
    """Broken: adds x[t+1] - x[t+1].detach(). Its value is exactly 0, so outputs never
    change, but d y_t / d x_{t+1} = I: training gradients flow from the future."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nxt = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)  # (B, T, D) x shifted back
        return super().forward(x) + (nxt - nxt.detach())  # (B, T, D) value unchanged


class Overflowy(MaskedAttention):
    """Broken: softmax as exp(s) / sum exp(s) without subtracting the row max. Fine at unit
    inputs; at 10x inputs the logits reach the hundreds, exp overflows to inf, inf/inf = NaN."""

    def softmax(self, s: torch.Tensor) -> torch.Tensor:
        e = torch.exp(s)  # (B, H, T, T) no max-subtraction: overflows for s > 88 in fp32
        return e / e.sum(dim=-1, keepdim=True)  # (B, H, T, T)


class ChunkNormalised(MaskedAttention):
    """Broken: exp(s - m_chunk) / sum exp(s - m_chunk) with one m per 64 query rows, the max
    over all their scores, masked future ones included. It cancels exactly, so at init
    (logits O(1)) outputs are causal to rounding; once a later logit exceeds an earlier
    row's by > ~87, that row's weights underflow and its output depends on the future."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, T, h)
        raw = (q @ k.transpose(-1, -2)).float() / q.size(-1) ** 0.5  # (B, H, T, T) future included
        c = 64
        m = torch.cat(
            [
                raw[:, :, a : a + c].detach().amax(dim=(-1, -2), keepdim=True).expand(-1, -1, min(c, T - a), 1)
                for a in range(0, T, c)
            ],
            dim=2,
        )  # (B, H, T, 1) one max per chunk, later keys in it (a constant)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        e = torch.exp(raw - m).masked_fill(~keep, 0.0)  # (B, H, T, T)
        p = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)  # (B, H, T, T)
        y = p.to(v.dtype) @ v  # (B, H, T, h)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D)


class LeaksPast400(MaskedAttention):
    """Broken only for long sequences: causal up to T = 400 tokens; above, query t also sees key
    t+1 (a mask or a kernel that changes with the length, as a blocked path for long inputs)."""

    def scores(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.diagonal = 1 if x.shape[1] > 400 else 0
        return super().scores(x)


class _BF16Backward(torch.autograd.Function):
    """Identity forward; an fp32 backward rounds the incoming gradient to bfloat16 (8 bits), as a
    fused half-precision backward kernel with a float64 reference path would."""

    @staticmethod
    def forward(ctx, y: torch.Tensor) -> torch.Tensor:
        return y.view_as(y)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> torch.Tensor:
        g = grads[0]
        return g if g.dtype == torch.float64 else g.to(torch.bfloat16).to(g.dtype)


class CoarseGrad(MaskedAttention):
    """Broken in its gradients only: exact outputs, a backward through bf16 (relative 4e-3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _BF16Backward.apply(super().forward(x))  # (B, T, D) values untouched
        assert isinstance(y, torch.Tensor)
        return y


class Nondeterministic(MaskedAttention):
    """Broken: per-channel output gains drawn from Python's ``random`` at build time, which
    ``torch.manual_seed`` does not seed: two builds under one seed differ."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        gains = [random.uniform(0.5, 2.0) for _ in range(config.d_model)]
        self.gain = nn.Parameter(torch.tensor(gains))  # (D,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.gain  # (B, T, D)


class BadShape(MaskedAttention):
    """Broken: returns only the first half of the channels, (B, T, D/2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)[..., : x.size(-1) // 2]  # (B, T, D/2)


class BadDtype(MaskedAttention):
    """Broken: returns float64 for a float32 input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).double()  # (B, T, D) float64


class UndeclaredAux(MaskedAttention):
    """Broken: in training it returns an auxiliary loss, but registers aux_loss=False."""

    def forward(self, x: torch.Tensor) -> torch.Tensor | MixerOutput:
        y = super().forward(x)  # (B, T, D)
        if not self.training:
            return y
        return MixerOutput(y, (AuxLoss("energy", y.float().square().mean(), 0.01),))


class Hangs(MaskedAttention):
    """Broken: forward blocks until a test sets ``RELEASE``, then raises (so the abandoned
    worker thread ends at once instead of running on beside later tests)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        RELEASE.wait()
        raise RuntimeError("released after the time limit")


def raising_builder(config: ModelConfig, layer_idx: int) -> nn.Module:
    """Broken: the builder itself raises."""
    raise RuntimeError("deliberately broken builder")


def _parse_width(text: str) -> int:
    return int(text)


def raising_from_builder(config: ModelConfig, layer_idx: int) -> nn.Module:
    """Broken: the builder raises from another exception, whose message says what went wrong."""
    try:
        _parse_width("wide")
    except ValueError as exc:
        raise RuntimeError(f"cannot build layer {layer_idx}") from exc
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class MeanState:
    total: torch.Tensor  # (B, D) sum of values so far, fp32
    count: torch.Tensor  # (B,) tokens so far, stored in bfloat16 (the bug)


class Drifty(nn.Module):
    """Causal running mean:  y_t = W_o (1/(t+1)) sum_{j<=t} W_v x_j.

    Parallel form: a prefix sum divided by the position, exact. Broken: ``step`` stores its
    token count in bfloat16, whose 8-bit significand holds integers exactly only up to 256;
    256 + 1 rounds back to 256, so one-token decoding drifts from the parallel form after
    256 tokens (and chunked decoding once the count lands between representable values).
    """

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.v = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.o = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(1)
        n = torch.arange(1, T + 1, device=x.device, dtype=torch.float32)[:, None]  # (T, 1)
        mean = torch.cumsum(self.v(x).float(), dim=1) / n  # (B, T, D) fp32 prefix sums
        return self.o(mean.to(x.dtype))  # (B, T, D)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> MeanState:
        d = self.v.out_features
        return MeanState(
            torch.zeros(batch_size, d, device=device, dtype=torch.float32),
            torch.zeros(batch_size, device=device, dtype=torch.bfloat16),
        )

    def step(self, x: torch.Tensor, state: MeanState) -> tuple[torch.Tensor, MeanState]:
        t = x.size(1)
        sums = state.total[:, None] + torch.cumsum(self.v(x).float(), dim=1)  # (B, t, D)
        n = state.count.float()[:, None] + torch.arange(1, t + 1, device=x.device)  # (B, t)
        y = self.o((sums / n[..., None]).to(x.dtype))  # (B, t, D)
        return y, MeanState(sums[:, -1], (state.count.float() + t).to(torch.bfloat16))


@dataclass(frozen=True)
class Cache:
    k: torch.Tensor  # (B, max_len, D) preallocated; slots >= length unused
    v: torch.Tensor  # (B, max_len, D)
    length: int


class WrongStateSize(MaskedAttention):
    """Broken: correct attention and K/V cache (2 T D elements), but its ``state_size``
    declares T D, as if only the keys were cached."""

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> Cache:
        d = self.c_proj.in_features
        return Cache(
            torch.zeros(batch_size, max_len, d, device=device, dtype=dtype),
            torch.zeros(batch_size, max_len, d, device=device, dtype=dtype),
            0,
        )

    def step(self, x: torch.Tensor, state: Cache) -> tuple[torch.Tensor, Cache]:
        B, t, D = x.shape
        start, end = state.length, state.length + t
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, t, h)
        state.k[:, start:end] = k.transpose(1, 2).reshape(B, t, D)  # write slots [start, end)
        state.v[:, start:end] = v.transpose(1, 2).reshape(B, t, D)
        keys, vals = self.heads(state.k[:, :end]), self.heads(state.v[:, :end])  # (B, H, end, h)
        s = q @ keys.transpose(-1, -2) / q.size(-1) ** 0.5  # (B, H, t, end)
        qpos = torch.arange(start, end, device=x.device)[:, None]  # (t, 1)
        future = torch.arange(end, device=x.device)[None, :] > qpos  # (t, end)
        y = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1) @ vals  # (B, H, t, h)
        return self.c_proj(y.transpose(1, 2).reshape(B, t, D)), Cache(state.k, state.v, end)


@hookimpl
def attnbench_register_variants(register) -> None:
    def plain(name: str, build, **kw) -> None:
        register(Variant(name=name, build_mixer=build, description=f"broken: {name}", **kw))

    plain("leaky", Leaky)
    plain("grad_leaky", GradLeaky)
    plain("overflowy", Overflowy)
    plain("chunk_normalised", ChunkNormalised)
    plain("nondeterministic", Nondeterministic)
    plain("bad_shape", BadShape)
    plain("bad_dtype", BadDtype)
    plain("hangs", Hangs)
    plain("drifty", Drifty, decode="recurrent", state_size=lambda c, i, T: c.d_model + 1)
    plain("wrong_state_size", WrongStateSize, decode="kv_cache", state_size=lambda c, i, T: T * c.d_model)
    # Declares 8 T D for a cache of 2 T D: a 4x overstatement (as Zoology's RWKV-7 state size was).
    plain("overstated_state", WrongStateSize, decode="kv_cache", state_size=lambda c, i, T: 8 * T * c.d_model)
    plain("undeclared_aux", UndeclaredAux)
    plain("own_model_leaky", MaskedAttention, build_model=lambda c: Backbone(c, Leaky))
    plain(
        "raises", raising_builder, decode="recurrent", state_size=lambda c, i, T: 1, flops_per_token=lambda c, i, T: 1.0
    )
    plain("leaks_past_400", LeaksPast400)
    plain("coarse_grad", CoarseGrad)
    plain("raises_from", raising_from_builder)
