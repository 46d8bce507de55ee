"""Options of Mamba2 (``mamba2``), free of torch: the registration sizes the mixer with
them, the mixer (``mamba2_model``) reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig
from attnbench.plugins.recurrent.checks import KERNELS, check_kernel, check_positive_int

FLA_SSD_OP = "fla.ops.simple_gla.chunk_simple_gla"


@dataclass(frozen=True)
class Mamba2Options:
    """d_state: N_s, the size of B and C. d_conv: the causal convolution's width. expand:
    inner width / d_model. n_groups: groups of heads sharing B and C. chunk_size: positions
    per chunk of the training form. dt_min, dt_max: range of the initial step sizes.
    kernel: chunked (ours) or fla (simple GLA's Triton kernel, CUDA only; decoding stays on ours)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kernel": KERNELS}
    d_state: int = 128
    d_conv: int = 4
    expand: int = 2
    n_groups: int = 1
    chunk_size: int = 64
    dt_min: float = 0.001
    dt_max: float = 0.1
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        for name in ("d_state", "d_conv", "expand", "n_groups", "chunk_size"):
            check_positive_int(name, getattr(self, name))
        if not (
            isinstance(self.dt_min, (int, float))
            and isinstance(self.dt_max, (int, float))
            and 0 < self.dt_min <= self.dt_max
        ):
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={self.dt_min!r}, dt_max={self.dt_max!r}")
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> Mamba2Options:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, Mamba2Options) else Mamba2Options()


def dims(config: ModelConfig) -> tuple[int, int, int]:
    """(inner width, head size P, convolution channels), checked against the config."""
    opts = options_of(config)
    inner = opts.expand * config.d_model
    if inner % config.n_head or config.n_head % opts.n_groups:
        raise ValueError(
            f"mamba2 needs n_head ({config.n_head}) to divide expand * d_model ({inner}) "
            f"and n_groups ({opts.n_groups}) to divide n_head"
        )
    return inner, inner // config.n_head, inner + 2 * opts.n_groups * opts.d_state
