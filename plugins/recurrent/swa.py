"""Sliding-window softmax attention (Longformer's local causal band; Mistral's and Based's
window layers):

    y = softmax(Q K^T / sqrt(h) + M_w) V,  then W_o,   M_w,ij = 0 for i - w < j <= i, else -inf

Training runs the blocked kernel (``window_kernel``: O(T (c + w)) time and memory); decoding
carries the last w - 1 keys and values, so the state stops growing at the window.
The mixer (``SlidingWindowAttention``) and its attention maps are in ``swa_model``; this module
holds its options and registers them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.checks import KERNELS, check_kernel, check_positive_int
from attnbench.plugins.recurrent.flops import mean_keys

MODEL = "attnbench.plugins.recurrent.swa_model"  # torch: imported when the first mixer is built


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


def options_of(config: ModelConfig) -> SWAOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, SWAOptions) else SWAOptions()


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return 2 * min(T, options_of(config).window - 1) * config.d_model  # K and V of the last w - 1 positions


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """QKV and output projections 8 d^2; scores and mixing over the keys a query sees on
    average, min(i + 1, w): 2 * 2 d each."""
    d = config.d_model
    return 8.0 * d * d + 4.0 * d * mean_keys(T, options_of(config).window)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="swa",
            build_mixer=f"{MODEL}:SlidingWindowAttention",
            options=SWAOptions,
            decode="window",
            description="Sliding-window softmax attention (window w, itself included), blocked, O(w) decode cache",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
