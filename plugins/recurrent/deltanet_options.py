"""Options of DeltaNet (``deltanet``), free of torch: the registration sizes the mixer with
them, the mixer (``deltanet_model``) reads them."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig
from attnbench.plugins.recurrent.checks import check_kernel, check_positive_int


@dataclass(frozen=True)
class DeltaOptions:
    """chunk_size: positions per chunk of the WY form. conv_size: width of the short causal
    convolution on q, k, v (0: none, SiLU only). kernel: chunked (ours) or fla (CUDA only;
    decoding stays on ours)."""

    chunk_size: int = 64
    conv_size: int = 4
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        check_positive_int("chunk_size", self.chunk_size)
        check_positive_int("conv_size", self.conv_size, minimum=0)
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> DeltaOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, DeltaOptions) else DeltaOptions()
