"""Pieces the recurrent mixers share: chunking a sequence, a causal mask, a fused matmul-add, the
compute dtype, a per-head RMS norm, a causal short convolution with its decode cache, and the fla
kernel guard. The option checks, which need no torch, are in ``checks``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.plugins.kernels.fla_linear import fla_unavailable, follow_torch_fp32_precision
from attnbench.plugins.kernels.short_conv import causal_depthwise_conv

# Re-exported: older checkouts' mixer modules import the checks from here, and benchmarks load
# them beside this package (benchmarks/bench_mixers_ab.py).
from attnbench.plugins.recurrent.checks import KERNELS as KERNELS
from attnbench.plugins.recurrent.checks import check_kernel as check_kernel
from attnbench.plugins.recurrent.checks import check_positive_int as check_positive_int


def chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, T, e) -> (B, H, N, c, e), N = ceil(T / c), the tail padded with zeros (a zero key,
    value or log decay adds nothing to a chunk's state; the causal mask keeps padded keys from
    every real query)."""
    B, H, T, e = x.shape
    N = -(-T // c)
    return F.pad(x, (0, 0, 0, N * c - T)).reshape(B, H, N, c, e)


def causal(c: int, like: torch.Tensor, strict: bool = False) -> torch.Tensor:
    """(c, c) 1 where key j may reach query i (j <= i; j < i when ``strict``), else 0, in ``like``'s
    dtype: a product with it masks scores in one pass each way (masked_fill copies, then fills:
    its fwd + bwd took 1.5-1.8x as long at a chunk of 64 on a CPU). Only for finite scores."""
    return torch.ones(c, c, dtype=like.dtype, device=like.device).tril(-1 if strict else 0)


def add_matmul(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """scale (acc + a @ b) over any leading batch dims (..., m, n), as one baddbmm: the sum and the
    scale made inside the matmul, not two more passes over the output. Views where the batch dims
    collapse; a copy where they do not."""
    flat = (t.reshape(-1, *t.shape[-2:]) for t in (acc, a, b))  # (batch, ., .)
    return torch.baddbmm(*flat, beta=scale, alpha=scale).view(acc.shape)


def compute_dtype(*xs: torch.Tensor) -> torch.dtype:
    """float64 when any input is float64 (reference runs, the gate), else fp32."""
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def state_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """Recurrent states are running sums: fp32 unless float64 is asked."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def require_fla(name: str, x: torch.Tensor) -> None:
    """Raise (never fall back) when the fla kernel cannot run on x."""
    reason = fla_unavailable(x.device)
    if reason is None and x.dtype == torch.float64:
        reason = "the fla kernels have no float64 path"
    if reason:
        raise RuntimeError(f"{name} kernel 'fla' cannot run: {reason}; use kernel: chunked")
    follow_torch_fp32_precision()  # fla's fp32 dot products as precise as torch's


def full_precision_linear(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """linear(x) in fp32 (float64 when given float64) even under autocast: for the small gate
    projections, whose rounding a decay exponentiates."""
    dt = compute_dtype(x)
    with torch.autocast(x.device.type, enabled=False):
        bias = None if linear.bias is None else linear.bias.to(dt)
        return F.linear(x.to(dt), linear.weight.to(dt), bias)  # (..., out) fp32 or fp64


class HeadRMSNorm(nn.Module):
    """RMS norm over each head's channels (fp32 inside), one learned gain per channel."""

    def __init__(self, head_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, o: torch.Tensor) -> torch.Tensor:
        dt = compute_dtype(o)
        x = o.to(dt)  # (B, H, T, h)
        # x / sqrt(mean(x^2) + eps) * w per head: torch's fused rms_norm (one pass each way on a CPU, not five)
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(dt), self.eps).to(o.dtype)  # (B, H, T, h)


class ShortConv(nn.Module):
    """Causal depthwise convolution over time (width K) then SiLU, as DeltaNet and Mamba2 put
    before the recurrence. Decoding carries the last K - 1 inputs (B, K - 1, C)."""

    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.width = width
        self.conv = nn.Conv1d(channels, channels, width, groups=channels, bias=False)

    def init_cache(self, batch: int, device=None, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.zeros(batch, self.width - 1, self.conv.in_channels, device=device, dtype=state_dtype(dtype))

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C), cache (B, K-1, C) the inputs before x (zeros at the start)."""
        if cache is None:
            cache = self.init_cache(x.shape[0], x.device, x.dtype)
        xx = torch.cat([cache.to(x.dtype), x], dim=1)  # (B, K-1+T, C)
        y = causal_depthwise_conv(xx, self.conv.weight.to(x.dtype))  # (B, T, C)
        new_cache = xx[:, xx.shape[1] - (self.width - 1) :].to(cache.dtype, copy=True)  # (B, K-1, C) its own storage
        return F.silu(y), new_cache  # (B, T, C), (B, K-1, C)
