"""Third-party mixers wrong in the ways real kernels go wrong (issue 65), each written against
docs/plugins.md and each passing the gate of 97b26f5. Load in-process:

    get_plugin_manager(extra_plugins=[("adversarial", adversarial_variants)], entry_points=False)

variant           what is wrong                                         caught by
band_leak         queries 1024-1299 also see the next key               both leak checks, at an
                                                                        experiment length >= 1025
chunk_edge        query 64m-1 also sees key 64m (every 64-token edge,    both leak checks
                  at every length)
step_after_400    step divides by count + 1 once 400 tokens are held    incremental, at an
                  (the forward is right)                                experiment length > 400
grad_off_1e2      d/d c_proj.weight x 1.01, in fp32 and float64 alike  grad_finite_difference
grad_off_1e3_fp32 d/d c_proj.weight x 1.001, in fp32 only               grad_float64_at_scale
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, mark_residual
from tests.broken_variants import MaskedAttention

BAND = (1024, 1299)  # band_leak's queries that see the next key


class _SeesNext(MaskedAttention):
    """Causal attention except that the queries ``leaking(T)`` also see key t+1."""

    def leaking(self, T: int) -> range:
        raise NotImplementedError

    def scores(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T, D = x.shape[1:]
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, T, h)
        s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5  # (B, H, T, T)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        rows = torch.tensor([t for t in self.leaking(T) if t + 1 < T], dtype=torch.long, device=x.device)  # (n,)
        keep[rows, rows + 1] = True
        return s.float().masked_fill(~keep, float("-inf")), v  # (B, H, T, T)


class BandLeak(_SeesNext):
    """Queries 1024..1299 also see the next key (a blocked path for long inputs whose second
    block is off by one)."""

    def leaking(self, T: int) -> range:
        return range(BAND[0], BAND[1] + 1)


class ChunkEdge(_SeesNext):
    """Query 64m-1 also sees key 64m: a chunked kernel whose inter-chunk mask is one off."""

    def leaking(self, T: int) -> range:
        return range(63, T, 64)


@dataclass(frozen=True)
class Running:
    total: torch.Tensor  # (B, D) sum of values so far
    count: int


class StepAfter400(nn.Module):
    """y_t = W_o (mean of W_v x_s over s <= t). The forward is exact; ``step`` divides by the
    count + 1 once it holds more than 400 tokens (a cache index that wraps, say)."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.v = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.o = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        n = torch.arange(1, T + 1, device=x.device, dtype=x.dtype)[None, :, None]  # (1, T, 1)
        return self.o(self.v(x).cumsum(dim=1) / n)  # (B, T, D)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> Running:
        return Running(torch.zeros(batch_size, self.v.out_features, device=device, dtype=dtype), 0)

    def step(self, x: torch.Tensor, state: Running) -> tuple[torch.Tensor, Running]:
        t = x.shape[1]
        sums = state.total[:, None] + self.v(x).cumsum(dim=1)  # (B, t, D)
        n = torch.arange(state.count + 1, state.count + t + 1, device=x.device, dtype=x.dtype)  # (t,)
        n = torch.where(n > 400, n + 1, n)[None, :, None]  # (1, t, 1) wrong past 400
        return self.o(sums / n), Running(sums[:, -1], state.count + t)


class _OffGrad(torch.autograd.Function):
    """Identity forward; the backward scales the gradient by 1 + ``off`` (in fp32 only, or in
    every dtype)."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, off: float, fp32_only: bool) -> torch.Tensor:
        ctx.off, ctx.fp32_only = off, fp32_only
        return w.view_as(w)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        g = grads[0]
        if ctx.fp32_only and g.dtype == torch.float64:
            return g, None, None
        return g * (1 + ctx.off), None, None


class GradOff(MaskedAttention):
    """Exact outputs; the gradient of c_proj.weight is 1% too large in every dtype."""

    off, fp32_only = 1e-2, False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        s, v = self.scores(x)  # (B, H, T, T), (B, H, T, h)
        y = (self.softmax(s).to(v.dtype) @ v).transpose(1, 2).reshape(B, T, D)  # (B, T, D)
        w = _OffGrad.apply(self.c_proj.weight, self.off, self.fp32_only)
        assert isinstance(w, torch.Tensor)
        return F.linear(y, w, self.c_proj.bias)  # (B, T, D)


class GradOffFp32(GradOff):
    """Exact outputs; the gradient of c_proj.weight is 0.1% too large in fp32 only."""

    off, fp32_only = 1e-3, True


@hookimpl
def attnbench_register_variants(register) -> None:
    def plain(name: str, build, **kw) -> None:
        register(Variant(name=name, build_mixer=build, description=f"adversarial: {name}", **kw))

    plain("band_leak", BandLeak)
    plain("chunk_edge", ChunkEdge)
    plain("step_after_400", StepAfter400, decode="recurrent")
    plain("grad_off_1e2", GradOff)
    plain("grad_off_1e3_fp32", GradOffFp32)
