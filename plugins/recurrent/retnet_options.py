"""Options of RetNet (retention) (``retnet``), free of torch: the registration sizes the mixer with
them, the mixer (``retnet_model``) reads them."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig
from attnbench.plugins.recurrent.checks import check_kernel, check_positive_int


@dataclass(frozen=True)
class RetNetOptions:
    """chunk_size: positions per chunk of the training form. kernel: chunked (ours) or fla
    (flash-linear-attention's Triton kernel, CUDA only; decoding stays on ours)."""

    chunk_size: int = 64
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        check_positive_int("chunk_size", self.chunk_size)
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> RetNetOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, RetNetOptions) else RetNetOptions()
