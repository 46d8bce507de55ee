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
chunks. D * (A B^T) is one matmul of (A e^G)(B e^-G)^T, and takes D from segment sums for
the rows whose decay since the chunk's start spans more than e^-30 (``_decayed``, GLA's
rule). fp32 with autocast off (float64 when given float64); the caller's state is untouched.
"""

from __future__ import annotations

from typing import overload

import torch
import torch.nn.functional as F

from attnbench.plugins.recurrent.common import causal, compute_dtype, state_dtype
from attnbench.plugins.recurrent.decays import FACTOR_SPAN, after_sums, exact_past_span, segment_sums

# re-exported for older checkouts' modules (see common.py)
from attnbench.plugins.recurrent.flops import delta_flops_per_token as delta_flops_per_token


def _chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, T, ...) -> (B, H, N, c, ...), the tail padded with zeros (k = v = beta = g = 0:
    the padded steps leave the state as it was)."""
    B, H, T = x.shape[:3]
    N = -(-T // c)
    pad = [0, 0] * (x.dim() - 3) + [0, N * c - T]
    return F.pad(x, pad).reshape(B, H, N, c, *x.shape[3:])


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
        gc = torch.zeros_like(bc[..., 0]) if g is None else _chunks(g.to(dt), c)  # (B, H, N, c) log a_t
        G = gc.cumsum(dim=3)  # (B, H, N, c) log decay from the chunk's start through i, <= 0
        gamma = torch.exp(G)[..., None]  # (B, H, N, c, 1) decay since the chunk start, <= 1
        decays = None if g is None else (gc, G)
        strict = _decayed(bc * kc, kc, decays, diagonal=False)  # (B, H, N, c, c) beta_i D_ij k_i.k_j, j < i
        eye = torch.eye(c, dtype=dt, device=v.device)  # (c, c)
        rhs = bc * torch.cat([vc, gamma * kc], dim=-1)  # (B, H, N, c, d_v + d_k)
        uw = torch.linalg.solve_triangular(eye + strict, rhs, upper=False, unitriangular=True)  # (B, H, N, c, d_v+d_k)
        d_v = vc.shape[-1]
        u_tilde, w = uw[..., :d_v], uw[..., d_v:]  # (B, H, N, c, d_v), (B, H, N, c, d_k)
        k_end = kc * torch.exp(after_sums(gc[..., None]))  # (B, H, N, c, d_k) decayed to the chunk end
        through = torch.exp(gc.sum(dim=3))[..., None, None]  # (B, H, N, 1, 1) decay across the chunk
        s, before, us = start.to(dt), [], []
        # chunks unbound once: s[:, :, n] inside the loop would cost a full-size zero gradient per chunk
        per_chunk = (t.unbind(2) for t in (u_tilde, w, through, k_end.transpose(-1, -2)))
        for u_n, w_n, a_n, kt_n in zip(*per_chunk, strict=True):
            u = u_n - w_n @ s  # (B, H, c, d_v) the delta-rule updates U
            before.append(s)
            us.append(u)
            s = a_n * s + kt_n @ u  # (B, H, d_k, d_v)
        carried = torch.stack(before, dim=2)  # (B, H, N, d_k, d_v)
        U = torch.stack(us, dim=2)  # (B, H, N, c, d_v)
        scores = _decayed(qc, kc, decays, diagonal=True)  # (B, H, N, c, c) D_ij q_i.k_j, zero above the diagonal
        o = scale * ((qc * gamma) @ carried + scores @ U)  # (B, H, N, c, d_v)
        o = o.flatten(2, 3)[:, :, :T]  # (B, H, T, d_v)
    return o.to(out_dtype), (s.to(state_dtype(state.dtype)) if state is not None else None)


def _decayed(
    a: torch.Tensor, b: torch.Tensor, decays: tuple[torch.Tensor, torch.Tensor] | None, diagonal: bool
) -> torch.Tensor:
    """D_ij a_i.b_j for j < i (j <= i with ``diagonal``), else 0: a, b (B, H, N, c, d); decays the
    log decays g and their cumulative sums G (B, H, N, c), None for none (D is the causal mask).
    D_ij = exp(G_i - G_j) factorises, one matmul of a e^G and b e^-G, for the rows whose decay
    since the chunk's start spans at most e^-FACTOR_SPAN (every factor within e^30: GLA's rule);
    the other rows take D from segment sums (exponents <= 0: no overflow, whatever the gate)."""
    c = a.shape[3]
    seen = causal(c, a, strict=not diagonal)  # (c, c) the pairs kept
    if decays is None:
        return (a @ b.transpose(-1, -2)) * seen  # (B, H, N, c, c)
    g, G = decays
    a_f = a * torch.exp(G)[..., None]  # (B, H, N, c, d) a_i e^{G_i}, e^G <= 1
    b_f = b * torch.exp((-G).clamp_max(FACTOR_SPAN))[..., None]  # (B, H, N, c, d) b_j e^{-G_j}, clamped past kept rows
    out = (a_f @ b_f.transpose(-1, -2)) * seen  # (B, H, N, c, c) finite: every factor within e^30

    def exact(at: tuple[torch.Tensor, ...]) -> torch.Tensor:  # (M, c, c) segment-sum decays, exponents <= 0
        return (a[at] @ b[at].transpose(-1, -2)) * torch.exp(segment_sums(g[at])) * seen

    return exact_past_span(out, G, exact)  # (B, H, N, c, c)


def _one_chunk(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """The WY form of one chunk from S_0 = 0: q, k (B, H, T, d_k), v (B, H, T, d_v), beta (B, H, T)."""
    b = beta[..., None]  # (B, H, T, 1)
    kk = (b * k) @ k.transpose(-1, -2)  # (B, H, T, T) beta_i k_i.k_j
    qk = q @ k.transpose(-1, -2)  # (B, H, T, T) q_i.k_j
    if g is None:  # no decay: D is the causal mask
        strict, scores = kk.tril(-1), qk.tril()  # (B, H, T, T) j < i, j <= i
    else:
        D = torch.exp(segment_sums(g.to(q.dtype)))  # (B, H, T, T) exp(sum_{j<l<=i} g_l), 0 for j > i
        strict, scores = (D * kk).tril(-1), D * qk  # (B, H, T, T) beta_i D_ij k_i.k_j for j < i; D_ij q_i.k_j
    eye = torch.eye(q.shape[2], dtype=q.dtype, device=q.device)  # (T, T)
    u = torch.linalg.solve_triangular(eye + strict, b * v, upper=False, unitriangular=True)  # (B, H, T, d_v) U~ = U
    return scale * (scores @ u)  # (B, H, T, d_v)
