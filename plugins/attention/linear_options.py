"""Options of linear attention and the width of its feature maps, free of torch: the
registration (``linear``) sizes the mixer with them and the mixer (``linear_model``) reads them."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig


@dataclass(frozen=True)
class LinearOptions:
    """chunk_size: positions per chunk of the parallel form (64 was fastest at T = 1k-16k
    on CPU, h = 32; see benchmarks/bench_kernels.py). eps: added to the normaliser.
    feature_map: phi, one of elu (elu + 1, default), relu, softmax, taylor, performer.
    kernel: the parallel form's kernel: chunked (ours) or fla (flash-linear-attention's Triton
    kernel, CUDA only; decoding stays on ours, so the gate checks one against the other)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "feature_map": ("elu", "relu", "softmax", "taylor", "performer"),
        "kernel": ("chunked", "fla"),
    }
    chunk_size: int = 64
    eps: float = 1e-6
    feature_map: str = "elu"
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise ValueError(f"eps must be a number in (0, 1), got {self.eps!r}")
        if self.feature_map not in FEATURE_MAPS:
            close = difflib.get_close_matches(str(self.feature_map), FEATURE_MAPS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"feature_map must be one of {list(FEATURE_MAPS)}, got {self.feature_map!r}{hint}")
        if self.kernel not in self.CHOICES["kernel"]:
            raise ValueError(f"kernel must be one of {list(self.CHOICES['kernel'])}, got {self.kernel!r}")


def options_of(config: ModelConfig) -> LinearOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, LinearOptions) else LinearOptions()


FEATURE_MAPS = LinearOptions.CHOICES["feature_map"]


def feature_dim(name: str, h: int) -> int:
    """Features per head of each map: h, except taylor 1 + h + h^2 and performer 2h."""
    return {"taylor": 1 + h + h * h, "performer": 2 * h}.get(name, h)
