"""The DeltaNet mixer (the equations and the registration are in ``deltanet``): the module and
its decode state. ``gated_deltanet_model`` builds on this module."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, mark_residual, merge_heads, split_heads
from attnbench.plugins.recurrent.common import (
    HeadRMSNorm,
    ShortConv,
    compute_dtype,
    full_precision_linear,
    require_fla,
    state_dtype,
)
from attnbench.plugins.recurrent.delta_kernel import delta_rule
from attnbench.plugins.recurrent.deltanet import options_of
from attnbench.plugins.recurrent.fla_ops import FLA_OPS, fla_delta_rule


@dataclass(frozen=True)
class DeltaState:
    """Decode state: the delta-rule memory and the short convolution's recent inputs."""

    s: torch.Tensor  # (B, H, h, h) fp32 (float64 when asked)
    conv: torch.Tensor | None  # (B, K - 1, 3 D) the last K - 1 projected [q, k, v]; None without a conv


def _unit(x: torch.Tensor) -> torch.Tensor:
    """x / ||x|| over the last dim, as ``F.normalize`` (norm floored at 1e-12): (..., h)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True).clamp_min(1e-24))  # (..., h)


class DeltaNet(nn.Module):
    name = "deltanet"

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
        D = config.d_model
        self.n_head, self.head_dim, self.chunk_size, self.kernel = (
            config.n_head,
            config.head_dim,
            opts.chunk_size,
            opts.kernel,
        )
        self.c_attn = nn.Linear(D, 3 * D, bias=config.bias)
        self.conv = ShortConv(3 * D, opts.conv_size) if opts.conv_size else None
        self.b_proj = nn.Linear(D, config.n_head, bias=config.bias)
        self.norm = HeadRMSNorm(self.head_dim)
        self.c_proj = mark_residual(nn.Linear(D, D, bias=config.bias))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, chunk_size={self.chunk_size}, kernel={self.kernel}"

    def describe_path(self) -> dict[str, object]:
        parallel = FLA_OPS[self.name] if self.kernel == "fla" else "recurrent.delta_kernel.delta_rule"
        return {"kernel": parallel, "decode_kernel": "recurrent.delta_kernel.delta_rule", "chunk_size": self.chunk_size}

    def log_decay(self, x: torch.Tensor) -> torch.Tensor | None:
        """log a_t per head (B, H, T); DeltaNet has none."""
        return None

    def _out(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(self.norm(o)))  # (B, T, D)

    def _heads(self, x: torch.Tensor, conv: torch.Tensor | None):
        qkv = self.c_attn(x)  # (B, T, 3D)
        qkv, conv = self.conv(qkv, conv) if self.conv is not None else (F.silu(qkv), None)  # (B, T, 3D)
        q, k, v = split_heads(qkv, self.n_head)  # 3 x (B, H, T, h)
        dt = compute_dtype(q)
        q, k = _unit(q.to(dt)), _unit(k.to(dt))  # (B, H, T, h) unit norm, fp32
        beta = torch.sigmoid(full_precision_linear(self.b_proj, x)).transpose(1, 2)  # (B, H, T) in (0, 1), fp32
        return q, k, v, beta, self.log_decay(x), conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g, _ = self._heads(x, None)
        scale = self.head_dim**-0.5
        if self.kernel == "fla":
            require_fla(self.name, x)
            return self._out(x, fla_delta_rule(q, k, v, beta, g, scale))  # (B, T, D)
        o, _ = delta_rule(q, k, v, beta, g, None, self.chunk_size, scale)  # (B, H, T, h) from S_0 = 0
        return self._out(x, o)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> DeltaState:
        """Zero memory and zero convolution inputs; fp32 unless float64 is asked."""
        h = self.head_dim
        s = torch.zeros(batch_size, self.n_head, h, h, device=device, dtype=state_dtype(dtype))  # (B, H, h, h)
        conv = self.conv.init_cache(batch_size, device, dtype) if self.conv is not None else None
        return DeltaState(s, conv)

    def step(self, x: torch.Tensor, state: DeltaState) -> tuple[torch.Tensor, DeltaState]:
        q, k, v, beta, g, conv = self._heads(x, state.conv)
        o, s = delta_rule(q, k, v, beta, g, state.s, self.chunk_size, self.head_dim**-0.5)  # (B, H, t, h)
        return self._out(x, o), DeltaState(s, conv)
