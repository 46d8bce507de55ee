"""Sliding-window softmax attention (Longformer's local causal band; Mistral's and Based's
window layers):

    y = softmax(Q K^T / sqrt(h) + M_w) V,  then W_o,   M_w,ij = 0 for i - w < j <= i, else -inf

Training runs the blocked kernel (``window_kernel``: O(T (c + w)) time and memory); decoding
carries the last w - 1 keys and values, so the state stops growing at the window.
The mixer (``SlidingWindowAttention``) and its attention maps are in ``swa_model``; this module
registers them without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.flops import mean_keys
from attnbench.plugins.recurrent.swa_options import SWAOptions, options_of

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.recurrent.swa_model import SlidingWindowAttention


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return 2 * min(T, options_of(config).window - 1) * config.d_model  # K and V of the last w - 1 positions


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """QKV and output projections 8 d^2; scores and mixing over the keys a query sees on
    average, min(i + 1, w): 2 * 2 d each."""
    d = config.d_model
    return 8.0 * d * d + 4.0 * d * mean_keys(T, options_of(config).window)


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    # torch loads with the model, not the registration
    from attnbench.plugins.recurrent.swa_model import SlidingWindowAttention

    return SlidingWindowAttention(config, layer_idx)


def _attention_maps(mixer: SlidingWindowAttention, x: torch.Tensor) -> torch.Tensor:
    from attnbench.plugins.recurrent.swa_model import attention_maps

    return attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="swa",
            build_mixer=_build_mixer,
            options=SWAOptions,
            decode="window",
            description="Sliding-window softmax attention (window w, itself included), blocked, O(w) decode cache",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=_attention_maps,
        )
    )
