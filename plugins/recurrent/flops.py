"""Analytic FLOP counts of the recurrent kernels, and the window's mean keys per query (no
torch: a plugin's registration declares ``flops_per_token`` from them). Each counts what its
kernel (``gla_kernel``, ``delta_kernel``, ``ssd_kernel``, ``window_kernel``) computes."""

from __future__ import annotations


def gla_flops_per_token(n_head: int, d_k: int, d_v: int, chunk: int, T: int, per_channel: bool) -> float:
    """Kernel FLOPs per token: c x c scores 2 c d_k, their decays (per head c; per channel the
    factors q e^G and k e^-G, 2 d_k, as rows within ``decays.FACTOR_SPAN`` run), scores @ V 2 c d_v,
    chunk summary and carried-state read 2 * 2 d_k d_v."""
    c = min(chunk, max(T, 1))
    return n_head * (2.0 * c * d_k + (2.0 * d_k if per_channel else c) + 2.0 * c * d_v + 4.0 * d_k * d_v)


def delta_flops_per_token(n_head: int, d_k: int, d_v: int, chunk: int, T: int) -> float:
    """Kernel FLOPs per token: K K^T and Q K^T 2 * 2 c d_k, the triangular solve c (d_v + d_k),
    scores @ U 2 c d_v, W S, Q S and K^T U 3 * 2 d_k d_v. Training from S_0 = 0 with T <=
    chunk (``delta_rule``'s state None): the solve c d_v, and no W S, Q S or K^T U."""
    c = min(chunk, max(T, 1))
    if chunk >= T:
        return n_head * (4.0 * c * d_k + c * d_v + 2.0 * c * d_v)
    return n_head * (4.0 * c * d_k + c * (d_v + d_k) + 2.0 * c * d_v + 6.0 * d_k * d_v)


def ssd_flops_per_token(
    n_head: int, d_state: int, head_dim: int, chunk: int, T: int, n_groups: int | None = None
) -> float:
    """Per head: scores @ x 2 c P, chunk summary and carried-state read 2 * 2 N_s P; the c x c
    scores C B^T 2 c N_s per group (n_groups; None: one per head) (decays, exponentials, the
    per-head dt scaling and the chunk loop's 2 N_s P / c, not counted). Training from S_0 = 0
    with T <= chunk (``ssd_scan``'s state None) has no summary or state read."""
    c = min(chunk, max(T, 1))
    state = 0.0 if chunk >= T else 4.0 * d_state * head_dim
    scores = (n_head if n_groups is None else n_groups) * 2.0 * c * d_state
    return scores + n_head * (2.0 * c * head_dim + state)


def mean_keys(T: int, window: int) -> float:
    """Average keys a query sees over positions 0..T-1: min(i + 1, w)."""
    T = max(T, 1)
    if window >= T:
        return (T + 1) / 2
    return (window * (window + 1) / 2 + (T - window) * window) / T
