"""Chunked delta rule in the WY form (Yang et al. 2024, "Parallelizing Linear Transformers
with the Delta Rule over Sequence Length"), with the optional scalar decay of Gated DeltaNet
(Yang, Kautz & Hatamizadeh 2025). Per head, S (d_k, d_v), k_t unit-norm, beta_t in (0, 1):

    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale * S_t^T q_t

(a_t = exp(g_t), g_t <= 0; DeltaNet is g = 0). Written S_t = a_t S_{t-1} + k_t u_t^T with
u_t = beta_t (v_t - a_t S_{t-1}^T k_t). Inside a chunk, with G the cumulative log decay,
gamma_i = exp(G_i) and D_ij = exp(G_i - G_j) (j <= i, exponents <= 0):

    (I + tril_{-1}(diag(beta) (D * K K^T))) [U~, W] = diag(beta) [V, diag(gamma) K]   (WY, one solve)
    U = U~ - W S_n
    O = scale * ((Q * gamma) S_n + tril(D * Q K^T) U)
    S_{n+1} = gamma_c S_n + (K * exp(G_c - G))^T U

The unit lower-triangular solve replaces the token loop; only the state S_n loops over
chunks. D is one (c, c) matrix per head and chunk (``decays.decay_matrix``): each exponent
from float64 running sums, rounded once, and a backward that sums each pair over the steps it
spans. The factorised D * (A B^T) = (A e^G)(B e^-G)^T it replaced (issue 57) cost as much and
put the fp32 gradients of the decay's parameters 4.8x further from float64 than fla's fp32
recurrence (a row sum and a column sum cancelling). gamma_i = e^{G_i} from float64 too. fp32 with autocast off (float64
when given float64); the caller's state is untouched.
"""

from __future__ import annotations

from typing import overload

import torch
import torch.nn.functional as F

from attnbench.plugins.recurrent.common import add_matmul, causal, compute_dtype, state_dtype
from attnbench.plugins.recurrent.decays import after_sums, decay_matrix, since_start

# re-exported for older checkouts' modules (see common.py)
from attnbench.plugins.recurrent.flops import delta_flops_per_token as delta_flops_per_token


def _chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, T, ...) -> (B, H, N, c, ...) contiguous (one copy where x is a head view of time-major
    activations: every later product reads it as batched matrices), the tail padded with zeros
    (k = v = beta = g = 0: the padded steps leave the state as it was)."""
    B, H, T = x.shape[:3]
    N = -(-T // c)
    pad = [0, 0] * (x.dim() - 3) + [0, N * c - T]
    return (F.pad(x, pad) if N * c > T else x.contiguous()).view(B, H, N, c, *x.shape[3:])


@overload
def delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None,
    state: torch.Tensor,
    chunk: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None,
    state: None,
    chunk: int,
    scale: float,
) -> tuple[torch.Tensor, None]: ...
def delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None,
    state: torch.Tensor | None,
    chunk: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q, k (B, H, T, d_k) (k unit-norm), v (B, H, T, d_v), beta (B, H, T) in (0, 1), g (B, H, T)
    log decays <= 0 or None (no decay), state (B, H, d_k, d_v). Returns o (B, H, T, d_v) in
    v's dtype and the state after T.
    state None: training from S_0 = 0, the state after T not wanted (None is returned). Up to
    one chunk (T <= chunk) U = U~ (W S_0 = 0), so the solve takes V alone and no state is read
    or formed: O = scale * tril(D * Q K^T) U~."""
    out_dtype, (B, H, T, d_k) = v.dtype, k.shape
    dt = compute_dtype(q, k, v, beta)
    if state is None and chunk >= T:  # one chunk holds the whole sequence
        with torch.autocast(v.device.type, enabled=False):
            return _one_chunk(q.to(dt), k.to(dt), v.to(dt), beta.to(dt), g, scale).to(out_dtype), None
    start = state if state is not None else torch.zeros(B, H, d_k, v.shape[-1], device=v.device, dtype=dt)
    with torch.autocast(v.device.type, enabled=False):  # fp32 (fp64): the solve and the running state
        c = min(chunk, T)
        qc, kc, vc = (_chunks(t.to(dt), c) for t in (q, k, v))  # (B, H, N, c, d)
        bc = _chunks(beta.to(dt), c)[..., None]  # (B, H, N, c, 1)
        gc = None if g is None else _chunks(g.to(dt), c)  # (B, H, N, c) log a_t
        bk = bc * kc  # (B, H, N, c, d_k) beta_i k_i
        kk = bk @ kc.transpose(-1, -2)  # (B, H, N, c, c) beta_i k_i.k_j (the solve reads j < i alone)
        if gc is None:  # no decay: D is the causal mask
            D, gamma, through = None, None, [None] * qc.shape[2]
            strict, q_g, bk_g = kk, qc, bk
        else:
            D = decay_matrix(gc)  # (B, H, N, c, c) exp(sum_{j<l<=i} g_l), 0 for j > i
            gamma = since_start(gc, 3)[1][..., None]  # (B, H, N, c, 1) decay since the chunk's start, <= 1
            through = gamma[:, :, :, -1].flatten(0, 1)[..., None].unbind(1)  # N x (BH, 1, 1) across a chunk
            strict, q_g, bk_g = D * kk, qc * gamma, bk * gamma  # beta_i D_ij k_i.k_j; q e^G; beta gamma k
        rhs = torch.cat([bc * vc, bk_g], dim=-1)  # (B, H, N, c, d_v + d_k) diag(beta) [V, diag(gamma) K]
        uw = _solve_unit_lower(strict, rhs)  # (B, H, N, c, d_v + d_k) [U~, W]
        d_v = vc.shape[-1]
        u_tilde, w = uw[..., :d_v], uw[..., d_v:]  # (B, H, N, c, d_v), (B, H, N, c, d_k)
        k_end = kc if gc is None else kc * torch.exp(after_sums(gc[..., None]))  # (B, H, N, c, d_k) to the chunk end
        s, before, us = start.to(dt).flatten(0, 1), [], []  # (BH, d_k, d_v) S_0, the heads as one batch
        # chunks unbound once: s[:, n] inside the loop would cost a full-size zero gradient per chunk
        per_chunk = [t.flatten(0, 1).unbind(1) for t in (u_tilde, w, k_end.transpose(-1, -2))]
        for u_n, w_n, kt_n, a_n in zip(*per_chunk, through, strict=True):  # a_n (BH, 1, 1) decay across chunk n
            before.append(s)
            u = torch.baddbmm(u_n, w_n, s, alpha=-1.0)  # (BH, c, d_v) U = U~ - W S_n, one op
            us.append(u)
            s = torch.baddbmm(s if a_n is None else a_n * s, kt_n, u)  # (BH, d_k, d_v) S_{n+1}
        carried = torch.stack(before, dim=1)  # (BH, N, d_k, d_v) S before each chunk
        U = torch.stack(us, dim=1)  # (BH, N, c, d_v)
        qk = qc @ kc.transpose(-1, -2)  # (B, H, N, c, c) q_i.k_j
        scores = qk * causal(c, qk) if D is None else qk * D  # (B, H, N, c, c) D_ij q_i.k_j, j <= i
        o = add_matmul(scores.flatten(0, 1) @ U, q_g.flatten(0, 1), carried, scale)  # (BH, N, c, d_v)
        o = o.view(B, H, -1, d_v)[:, :, :T]  # (B, H, T, d_v)
    return o.to(out_dtype), (s.view(start.shape).to(state_dtype(state.dtype)) if state is not None else None)


def _solve_unit_lower(L: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """(I + tril_{-1}(L))^{-1} rhs, (..., c, c) and (..., c, e): L's diagonal and upper triangle are
    never read, nor given gradients. Solved as the transposed system X^T (I + L)^T = rhs^T, which
    hands LAPACK's column-major solver the row-major tensors as they are (no copies): the forward
    took 0.4x the time of the direct call at (1, 4, 128, 64, 64) on one CPU thread."""
    return torch.linalg.solve_triangular(L.mT, rhs.mT, upper=True, left=False, unitriangular=True).mT


def _one_chunk(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """The WY form of one chunk from S_0 = 0: q, k (B, H, T, d_k), v (B, H, T, d_v), beta (B, H, T)."""
    b = beta[..., None]  # (B, H, T, 1)
    kk = (b * k) @ k.transpose(-1, -2)  # (B, H, T, T) beta_i k_i.k_j
    qk = q @ k.transpose(-1, -2)  # (B, H, T, T) q_i.k_j
    if g is None:  # no decay: D is the causal mask
        strict, scores = kk, qk * causal(q.shape[2], qk)  # (B, H, T, T) the solve reads j < i alone; j <= i
    else:
        D = decay_matrix(g.to(q.dtype))  # (B, H, T, T) exp(sum_{j<l<=i} g_l), 0 for j > i
        strict, scores = D * kk, D * qk  # (B, H, T, T) beta_i D_ij k_i.k_j (j < i read); D_ij q_i.k_j
    u = _solve_unit_lower(strict, b * v)  # (B, H, T, d_v) U~ = U
    return scale * (scores @ u)  # (B, H, T, d_v)
