"""The sliding-window attention mixer (the equation and the registration are in ``swa``): the
module and its attention maps."""

from __future__ import annotations

import torch
from torch import nn

from attnbench import ModelConfig, mark_residual, merge_heads, split_heads
from attnbench.plugins.recurrent.common import require_fla
from attnbench.plugins.recurrent.swa import options_of
from attnbench.plugins.recurrent.window_kernel import (
    FLA_WINDOW_OP,
    SDPA_BLOCKED_OP,
    SHORT_WINDOW_OP,
    WindowCache,
    fla_window_attention,
    window_attention,
    window_init_cache,
    window_weights,
)


class SlidingWindowAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.window, self.chunk_size, self.kernel = opts.window, opts.chunk_size, opts.kernel
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, window={self.window}, chunk_size={self.chunk_size}, kernel={self.kernel}"

    def describe_path(self) -> dict[str, object]:
        parallel = FLA_WINDOW_OP if self.kernel == "fla" else "recurrent.window_kernel.window_attention"
        return {
            "kernel": parallel,
            "decode_kernel": "recurrent.window_kernel.window_attention",
            "window": self.window,
            "chunk_size": self.chunk_size,
            "kernel_up_to_window": SHORT_WINDOW_OP if self.kernel != "fla" else parallel,  # training, T <= window
            "kernel_blocks": SDPA_BLOCKED_OP if self.kernel != "fla" else parallel,  # inside window_attention
        }

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_heads(self.c_attn(x), self.n_head)  # 3 x (B, H, T, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._heads(x)  # (B, H, T, h)
        if self.kernel == "fla":
            require_fla("swa", x)
            return self.c_proj(merge_heads(fla_window_attention(q, k, v, self.window)))  # (B, T, D)
        empty = window_init_cache(x.shape[0], self.n_head, self.head_dim, x.device, v.dtype)
        y, _ = window_attention(q, k, v, empty, self.window, self.chunk_size)  # (B, H, T, h)
        return self.c_proj(merge_heads(y))  # (B, T, D)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> WindowCache:
        return window_init_cache(batch_size, self.n_head, self.head_dim, device, dtype)

    def step(self, x: torch.Tensor, state: WindowCache) -> tuple[torch.Tensor, WindowCache]:
        q, k, v = self._heads(x)  # (B, H, t, h)
        y, new = window_attention(q, k, v, state, self.window, self.chunk_size)  # (B, H, t, h)
        return self.c_proj(merge_heads(y)), new


@torch.no_grad()
def attention_maps(mixer: SlidingWindowAttention, x: torch.Tensor) -> torch.Tensor:
    """P = softmax(Q K^T / sqrt(h) + M_w), zero outside the band: (B, H, T, T), rows sum to 1."""
    q, k, _ = mixer._heads(x)  # (B, H, T, h)
    return window_weights(q, k, mixer.window)
