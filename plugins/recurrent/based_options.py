"""Options of Based (``based``), free of torch: the registration sizes the mixer with
them, the mixer (``based_model``) reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig
from attnbench.plugins.recurrent.checks import KERNELS, check_kernel, check_positive_int

FLA_TAYLOR_OP = "fla.ops.based.parallel_based"


@dataclass(frozen=True)
class BasedOptions:
    """feature_dim: f, the q~ and k~ size per head (the paper's 16; 1 + f + f^2 features).
    window: positions the softmax part sees, itself included (the paper's small windows:
    64 to 128). chunk_size: positions per chunk (block) of the training forms. eps: added
    to the linear part's normaliser. kernel: chunked (ours) or fla (fla's parallel_based and
    parallel_attn Triton kernels, CUDA only; decoding stays on ours)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kernel": KERNELS}
    feature_dim: int = 16
    window: int = 64
    chunk_size: int = 64
    eps: float = 1e-6
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        for name in ("feature_dim", "window", "chunk_size"):
            check_positive_int(name, getattr(self, name))
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise ValueError(f"eps must be a number in (0, 1), got {self.eps!r}")
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> BasedOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, BasedOptions) else BasedOptions()


def n_features(f: int) -> int:
    return 1 + f + f * f  # the Taylor map's 0th, 1st and 2nd order terms
