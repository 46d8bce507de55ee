"""Options of Heinsen attention, free of torch: the registration (``heinsen``) sizes the
mixer with them and the mixer and model (``heinsen_model``) read them."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig


@dataclass(frozen=True)
class HeinsenOptions:
    """chunk_size: positions per chunk of the parallel form, in the backbone mixer and in
    the reference model (64 was fastest at T = 1k-16k on CPU, h = 32; see
    benchmarks/bench_kernels.py)."""

    chunk_size: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")


def options_of(config: ModelConfig) -> HeinsenOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, HeinsenOptions) else HeinsenOptions()
