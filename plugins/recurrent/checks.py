"""Option checks the recurrent mixers' options share (no torch: a plugin's registration,
and so ``attnbench validate``, runs them)."""

from __future__ import annotations

KERNELS = ("chunked", "fla")


def check_positive_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_kernel(value: object) -> None:
    if value not in KERNELS:
        raise ValueError(f"kernel must be one of {list(KERNELS)}, got {value!r}")
