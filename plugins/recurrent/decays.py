"""Decays of the chunked recurrent kernels, each exponent a sum of log decays over its own
span: segment sums (pairs j <= i inside a chunk), the decay matrix they exponentiate (with a
backward that sums each pair's contribution over the steps it spans), the decays since a
chunk's start and their inverses (summed and exponentiated in float64, rounded once), the sums
after each position to the chunk's end, and the span up to which a chunk's decay may instead be
factorised into e^G_i e^-G_j (GLA's decay per key channel).

Gradients (issue 57): a factorised decay e^{G_i} e^{-G_j} gives G_m a row sum and a column sum
of the same pairs, of opposite signs; their difference, summed over the steps after l, leaves
only the pairs that span step l, and cancels fp32 digits doing so. It put the fp32 gradients of
Mamba2's A_log 7.8x and Gated DeltaNet's 4.8x further from float64 than fla's fp32 recurrences
(worst of four seeds; up to 34x in a single one), and the log decays' own up to 9x
(tests/test_gate_gradients.py; docs/trust.md has the figures).
``decay_matrix`` sums the spanning pairs alone, so the scalar decays (Gated DeltaNet, Mamba2,
RetNet) use it and never factorise; GLA's decay per key channel stays factorised (a (c, c, d_k)
decay would cost d_k times more) for rows within e^-8 (``gla_kernel.GLA_SPAN``), its factors from
float64; past it, pairwise: at strong gates the factorised gradients were 2-16x fla's fp32 error
(issue 65), now within 2x (tests/test_gate_gla_strong.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# Scores weighted by decays factorise as (q_i e^{G_i}) . (k_j e^{-G_j}), G the cumulative log decay
# inside a chunk, when every factor stays in range: for the rows i whose decay since the chunk's
# start spans at most e^-FACTOR_SPAN (per channel where it has channels), every e^{-G_j}, j <= i,
# is <= e^30, far from fp32's e^88, and the product's rounding is that of two exponentials (a
# difference of running sums over at most 30 nats). Rows beyond (a forget gate near 0 for
# several steps) take the segment sums, which never overflow. The choice is made per row, from
# the row's own span: never from a later key's gate, so each output stays causal to the bit.
FACTOR_SPAN = 30.0
SPAN_MATMUL_MAX = 64  # up to this L, segment sums are one matmul with an (L*L, L) 0/1 matrix; above, a cumsum
# A step's log decay below this is e^-1e4 = 0 in float64 too; floored, a -inf step (a forget gate
# at 0) leaves every running sum finite, so a difference of two never makes inf - inf.
LOG_DECAY_FLOOR = -1e4


def segment_sums(log_a: torch.Tensor) -> torch.Tensor:
    """(..., L) -> (..., L, L): entry [i, j] = sum_{j<l<=i} log_a_l for j <= i, -inf above
    the diagonal (exp gives the causal decay matrix; no inf * 0). Each entry sums exactly its
    own terms: for chunk-sized L one matmul with the 0/1 span matrix (its backward one matmul
    too), for longer L a masked cumulative sum (the span matrix grows as L^3)."""
    L = log_a.shape[-1]
    above = torch.full((L, L), float("-inf"), dtype=log_a.dtype, device=log_a.device).triu(1)  # (L, L) j > i
    if L > SPAN_MATMUL_MAX:
        keep = torch.ones(L, L, dtype=torch.bool, device=log_a.device).tril(-1)  # (L, L) l > j
        rep = log_a[..., :, None].expand(*log_a.shape, L)  # (..., L, L) [l, j] = log_a_l
        return rep.masked_fill(~keep, 0.0).cumsum(dim=-2) + above  # (..., L, L) [i, j] = sum_{j<l<=i}
    pos = torch.arange(L, device=log_a.device)  # (L,)
    row, col, step = pos[:, None, None], pos[None, :, None], pos[None, None, :]  # [i, j, l] index grids
    span = ((col < step) & (step <= row)).to(log_a.dtype).reshape(L * L, L)  # (L*L, L) 1 where j < l <= i
    finite = log_a.clamp_min(torch.finfo(log_a.dtype).min / L)  # (..., L) a -inf step would give 0 * inf
    seg = finite.reshape(-1, L) @ span.T  # (rows, L*L) one 2-D matmul, not a batch of 1-row ones
    return seg.reshape(*log_a.shape[:-1], L, L) + above  # (..., L, L)


def after_sums(g: torch.Tensor) -> torch.Tensor:
    """sum_{j<l<=c} g_l for each j of a chunk, (..., c, e): a reverse cumulative sum shifted by one,
    each entry a sum over its own span (no difference of running sums)."""
    rev = g.flip(-2).cumsum(dim=-2).flip(-2)  # (..., c, e) sum_{l>=j}
    return F.pad(rev[..., 1:, :], (0, 0, 0, 1))  # (..., c, e) sum_{l>j}; 0 at the chunk's end


def exact_past_span(
    out: torch.Tensor,
    G_rows: torch.Tensor,
    exact: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
    span: float = FACTOR_SPAN,
) -> torch.Tensor:
    """``out`` (B, H, N, c, ...), computed factorised, with the rows whose log decay since the
    chunk's start, ``G_rows`` (B, H, N, c), fell below -FACTOR_SPAN taken from ``exact(at)``
    ((M, c, ...) for the chunks ``at`` = (b, h, n) indices that hold such a row). Each row keeps
    one form or the other by its own span alone, never a later key's gate: causal to the bit.
    ``span``: the widest log decay kept factorised (GLA's gradients ask for less: ``GLA_SPAN``)."""
    inside = G_rows >= -span  # (B, H, N, c) rows whose factors stay in range
    wide = ~inside[..., -1]  # (B, H, N) chunks with a row out of range (G falls along the chunk: the last one)
    if not wide.any():
        return out
    at = wide.nonzero(as_tuple=True)  # the wide chunks' (b, h, n) indices
    return out.index_put(at, torch.where(inside[at][..., None], out[at], exact(at)))  # far rows replaced


class _DecayMatrix(torch.autograd.Function):
    """exp(sum_{j<l<=i} g_l) for j <= i, else 0: (..., L) -> (..., L, L), fp32.

    Forward: G, the running sums, in float64; e^{G_i} and e^{-G_j} from them, each rounded once,
    their product for the rows whose decay since the start spans at most e^-FACTOR_SPAN (every
    factor within e^30: a few eps, where an fp32 G_i - G_j would be off by eps |G_i|), and for the
    other rows exp(G_i - G_j) of the float64 sums (as exact as a segment sum: eps |G_i - G_j|),
    clamped at 0 above the diagonal (no overflow there), then zeroed. One (L, L) product and a
    mask for most chunks, no (L, L) exponential.
    Backward: with P = dD * D, d g_l = sum_{i >= l} sum_{j < l} P_ij, the pairs that span step l
    and no others (``spanning_sums``). O(L^2) each way, where segment sums' span matrix is O(L^3)."""

    @staticmethod
    def forward(ctx, g: torch.Tensor) -> torch.Tensor:
        G = g.double().clamp_min(LOG_DECAY_FLOOR).cumsum(dim=-1)  # (..., L) float64 running sums
        rows, cols = torch.exp(G).to(g.dtype), torch.exp((-G).clamp_max(FACTOR_SPAN)).to(g.dtype)  # (..., L)
        D = (rows[..., :, None] * cols[..., None, :]).tril_()  # (..., L, L) e^G_i e^-G_j, 0 above the diagonal
        wide = G[..., -1] < -FACTOR_SPAN  # (...) a row past the span (G falls along the sequence: the last)
        if bool(wide.any()):
            at = wide.nonzero(as_tuple=True)
            G_at = G[at]  # (M, L)
            hi = G_at.to(g.dtype)  # G = hi + lo to float64's digits: fp32 differences, rounded once
            lo = (G_at - hi.double()).to(g.dtype)
            exact = (hi[..., :, None] - hi[..., None, :]).add_(lo[..., :, None] - lo[..., None, :])  # (M, L, L)
            exact = exact.clamp_max_(0.0).exp_().tril_()  # (M, L, L) exponents <= 0
            inside = (G_at >= -FACTOR_SPAN)[..., None]  # (M, L, 1) rows whose factors stay in range
            D[at] = torch.where(inside, D[at], exact)
        ctx.save_for_backward(D)
        return D

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> torch.Tensor:
        (D,) = ctx.saved_tensors
        return spanning_sums(grads[0] * D)


def spanning_sums(pairs: torch.Tensor) -> torch.Tensor:
    """(..., L, L) -> (..., L): [l] = sum_{i >= l} sum_{j < l} pairs_ij, the pairs whose segment
    (j, i] holds step l, and no others: the gradient of log decay l when pairs_ij = dA_ij A_ij
    for A_ij = exp(sum_{j<l<=i} g_l) B_ij. A running sum along j, then the column sums below the
    diagonal; no difference of a row sum and a column sum, which cancels fp32 digits."""
    running = pairs.cumsum(dim=-1)  # (..., L, L) [i, c] = sum_{j<=c} pairs_ij
    spans = running.tril_(-1).sum(dim=-2)  # (..., L) [c] = sum_{i>c} sum_{j<=c} pairs_ij: step c + 1's
    return F.pad(spans[..., :-1], (1, 0))  # (..., L) step 0: no pair spans a chunk's first step


def decay_matrix(log_a: torch.Tensor) -> torch.Tensor:
    """exp(sum_{j<l<=i} log_a_l) for j <= i, else 0: (..., L) -> (..., L, L). Float64 takes the
    segment sums (the reference form); fp32 the float64 running sums, each factor or exponent
    rounded once, and a backward that sums the pairs spanning each step (``_DecayMatrix``)."""
    if log_a.dtype == torch.float64:
        return torch.exp(segment_sums(log_a))
    out = _DecayMatrix.apply(log_a)
    assert isinstance(out, torch.Tensor)
    return out


def since_start(g: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """G = the cumulative log decay along ``dim`` (from a chunk's start) and exp(G), both summed
    and exponentiated in float64 and rounded once: an fp32 e^G from an fp32 G is off by
    eps |G| relative, and a chunk's G reaches -30 and below."""
    G = g.double().clamp_min(LOG_DECAY_FLOOR).cumsum(dim=dim)  # float64
    return G.to(g.dtype), torch.exp(G).to(g.dtype)


def decay_factors(g: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """G, e^G and e^-G (clamped at e^FACTOR_SPAN: the rows past the span take segment sums)
    along ``dim``, each from float64 and rounded once, so e^{G_i} e^{-G_j} is off by a few eps,
    not eps (|G_i| + |G_j|)."""
    G = g.double().clamp_min(LOG_DECAY_FLOOR).cumsum(dim=dim)  # float64
    inverse = torch.exp((-G).clamp_max(FACTOR_SPAN))
    return G.to(g.dtype), torch.exp(G).to(g.dtype), inverse.to(g.dtype)
