"""Chunked scans shared by the built-in mixers and offered to outside plugins.

``linear_attention`` (causal (phi(q) . phi(k)) v in chunks with a carried ``LinearState``) and
``log_attention`` (the same in log space with running max stabilisers, ``LogState``) run one code
path for training and for ``step``; ``attnbench.__all__`` re-exports them. The names load on
first use (PEP 562): ``chunked_flops_per_token`` needs no torch, so a plugin's registration that
counts FLOPs does not import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.lazy import lazy_getattr

if TYPE_CHECKING:
    from attnbench.kernels.chunked import (
        LinearState,
        LogState,
        linear_attention,
        linear_init_state,
        log_attention,
        log_init_state,
    )
    from attnbench.kernels.flops import chunked_flops_per_token

# public name -> the module that defines it (read by registry.identity without importing it)
HOMES: dict[str, str] = {
    **dict.fromkeys(
        ("LinearState", "LogState", "linear_attention", "linear_init_state", "log_attention", "log_init_state"),
        "attnbench.kernels.chunked",
    ),
    "chunked_flops_per_token": "attnbench.kernels.flops",
}


__getattr__ = lazy_getattr(__name__, HOMES, globals())


__all__ = [
    "LinearState",
    "LogState",
    "chunked_flops_per_token",
    "linear_attention",
    "linear_init_state",
    "log_attention",
    "log_init_state",
]
