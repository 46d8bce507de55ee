"""Options of sliding-window attention (``swa``), free of torch: the registration sizes the mixer with
them, the mixer (``swa_model``) reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig
from attnbench.plugins.recurrent.checks import KERNELS, check_kernel, check_positive_int


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
