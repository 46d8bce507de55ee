"""RetNet's retention mixer (the equations and the registration are in ``retnet``): the
module, its fixed log decays, and its implied attention maps."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, mark_residual, merge_heads, split_heads
from attnbench.plugins.recurrent.common import HeadRMSNorm, compute_dtype, require_fla
from attnbench.plugins.recurrent.fla_ops import FLA_OPS, fla_retention
from attnbench.plugins.recurrent.gla_kernel import gated_linear_attention, gla_init_state
from attnbench.plugins.recurrent.retnet import options_of


def log_decay(n_head: int, device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """log gamma per head, (H,): computed in float64, never stored at the model's dtype."""
    head = torch.arange(n_head, dtype=torch.float64, device=device)  # (H,)
    return torch.log1p(-torch.exp2(-5.0 - head)).to(dtype)  # (H,) log(1 - 2^(-5 - head))


class Retention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
        self.n_head, self.chunk_size, self.kernel = config.n_head, opts.chunk_size, opts.kernel
        D, self.head_dim = config.d_model, config.head_dim
        self.c_attn = nn.Linear(D, 3 * D, bias=config.bias)
        self.gate = nn.Linear(D, D, bias=config.bias)
        self.norm = HeadRMSNorm(self.head_dim)
        self.c_proj = mark_residual(nn.Linear(D, D, bias=config.bias))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, chunk_size={self.chunk_size}, kernel={self.kernel}"

    def describe_path(self) -> dict[str, object]:
        parallel = FLA_OPS["retnet"] if self.kernel == "fla" else "recurrent.gla_kernel.gated_linear_attention"
        return {
            "kernel": parallel,
            "decode_kernel": "recurrent.gla_kernel.gated_linear_attention",
            "chunk_size": self.chunk_size,
        }

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = split_heads(self.c_attn(x), self.n_head)  # 3 x (B, H, T, h)
        B, H, T, _ = q.shape
        g = log_decay(H, x.device, compute_dtype(q))[None, :, None, None].expand(B, H, T, 1)  # (B, H, T, 1)
        return q, k, v, g

    def _out(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.silu(self.gate(x)) * merge_heads(self.norm(o)))  # (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, g = self._heads(x)  # (B, H, T, h) x 3, (B, H, T, 1)
        scale = self.head_dim**-0.5
        if self.kernel == "fla":
            require_fla("retnet", x)
            return self._out(x, fla_retention(q, k, v, scale))  # (B, T, D)
        state = gla_init_state(x.shape[0], self.n_head, self.head_dim, self.head_dim, x.device, x.dtype)
        o, _ = gated_linear_attention(q, k, v, g, state, self.chunk_size, scale)  # (B, H, T, h)
        return self._out(x, o)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> torch.Tensor:
        """S (B, H, h, h), zero: fp32 unless float64 is asked."""
        return gla_init_state(batch_size, self.n_head, self.head_dim, self.head_dim, device, dtype)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v, g = self._heads(x)  # (B, H, t, h) x 3, (B, H, t, 1)
        o, new = gated_linear_attention(q, k, v, g, state, self.chunk_size, self.head_dim**-0.5)  # (B, H, t, h)
        return self._out(x, o), new


@torch.no_grad()
def attention_maps(mixer: Retention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = gamma^(i-j) q_i . k_j / sqrt(h) for j <= i (signed, unnormalised): (B, H, T, T)."""
    q, k, _, _ = mixer._heads(x)  # (B, H, T, h)
    T = q.shape[2]
    pos = torch.arange(T, device=x.device, dtype=torch.float32)  # (T,)
    gap = (pos[:, None] - pos[None, :]).clamp_min(0)  # (T, T) i - j
    decay = torch.exp(log_decay(mixer.n_head, x.device)[:, None, None] * gap).tril()  # (H, T, T)
    return (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(mixer.head_dim) * decay  # (B, H, T, T)
