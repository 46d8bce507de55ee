"""Sliding-window softmax attention (Longformer's local causal band; Mistral's and Based's
window layers):

    y = softmax(Q K^T / sqrt(h) + M_w) V,  then W_o,   M_w,ij = 0 for i - w < j <= i, else -inf

Training runs the blocked kernel (``window_kernel``: O(T (c + w)) time and memory); decoding
carries the last w - 1 keys and values, so the state stops growing at the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, mark_residual, merge_heads, split_heads
from attnbench.plugins.recurrent.common import KERNELS, check_kernel, check_positive_int, require_fla
from attnbench.plugins.recurrent.window_kernel import (
    FLA_WINDOW_OP,
    SHORT_WINDOW_OP,
    WindowCache,
    fla_window_attention,
    mean_keys,
    window_attention,
    window_init_cache,
    window_weights,
)


@dataclass(frozen=True)
class SWAOptions:
    """window: positions each query sees, itself included. chunk_size: queries per block of
    the training form. kernel: chunked (ours) or fla (fla's Triton kernel, CUDA only;
    decoding stays on ours, so the gate checks one against the other)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kernel": KERNELS}
    window: int = 64
    chunk_size: int = 64
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        check_positive_int("window", self.window)
        check_positive_int("chunk_size", self.chunk_size)
        check_kernel(self.kernel)


def _options(config: ModelConfig) -> SWAOptions:
    return config.options if isinstance(config.options, SWAOptions) else SWAOptions()


class SlidingWindowAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = _options(config)
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


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return 2 * min(T, _options(config).window - 1) * config.d_model  # K and V of the last w - 1 positions


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """QKV and output projections 8 d^2; scores and mixing over the keys a query sees on
    average, min(i + 1, w): 2 * 2 d each."""
    d = config.d_model
    return 8.0 * d * d + 4.0 * d * mean_keys(T, _options(config).window)


@torch.no_grad()
def attention_maps(mixer: SlidingWindowAttention, x: torch.Tensor) -> torch.Tensor:
    """P = softmax(Q K^T / sqrt(h) + M_w), zero outside the band: (B, H, T, T), rows sum to 1."""
    q, k, _ = mixer._heads(x)  # (B, H, T, h)
    return window_weights(q, k, mixer.window)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="swa",
            build_mixer=SlidingWindowAttention,
            options=SWAOptions,
            decode="window",
            description="Sliding-window softmax attention (window w, itself included), blocked, O(w) decode cache",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=attention_maps,
        )
    )
