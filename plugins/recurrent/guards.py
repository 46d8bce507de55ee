"""Option checks and the fla kernel guard shared by the mamba2, swa and based plugins."""

from __future__ import annotations

import importlib.util

import torch

KERNELS = ("chunked", "fla")


def check_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_kernel(value: object) -> None:
    if value not in KERNELS:
        raise ValueError(f"kernel must be one of {list(KERNELS)}, got {value!r}")


def fla_unavailable(x: torch.Tensor) -> str | None:
    """Why the fla kernels cannot run on x, or None when they can."""
    if x.device.type != "cuda":
        return f"the fla kernels run on CUDA only (this model is on {x.device})"
    if x.dtype == torch.float64:
        return "the fla kernels have no float64 path"
    if importlib.util.find_spec("fla") is None:
        return "flash-linear-attention is not installed (pip install flash-linear-attention)"
    return None


def require_fla(name: str, x: torch.Tensor) -> None:
    """Raise (never fall back) when the fla kernel cannot run on x."""
    reason = fla_unavailable(x)
    if reason:
        raise RuntimeError(f"{name} kernel 'fla' cannot run: {reason}; use kernel: chunked")
