"""Chunked scans shared by the built-in mixers and offered to outside plugins.

``linear_attention`` (causal (phi(q) . phi(k)) v in chunks with a carried ``LinearState``) and
``log_attention`` (the same in log space with running max stabilisers, ``LogState``) run one code
path for training and for ``step``; ``attnbench.__all__`` re-exports them.
"""

from attnbench.kernels.chunked import (
    LinearState,
    LogState,
    chunked_flops_per_token,
    linear_attention,
    linear_init_state,
    log_attention,
    log_init_state,
)

__all__ = [
    "LinearState",
    "LogState",
    "chunked_flops_per_token",
    "linear_attention",
    "linear_init_state",
    "log_attention",
    "log_init_state",
]
