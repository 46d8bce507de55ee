"""Decays of the chunked recurrent kernels, each exponent a sum of log decays over its own
span: segment sums (pairs j <= i inside a chunk), the sums after each position to the chunk's
end, and the span up to which a chunk's decay may instead be factorised into e^G_i e^-G_j."""

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
    out: torch.Tensor, G_rows: torch.Tensor, exact: Callable[[tuple[torch.Tensor, ...]], torch.Tensor]
) -> torch.Tensor:
    """``out`` (B, H, N, c, ...), computed factorised, with the rows whose log decay since the
    chunk's start, ``G_rows`` (B, H, N, c), fell below -FACTOR_SPAN taken from ``exact(at)``
    ((M, c, ...) for the chunks ``at`` = (b, h, n) indices that hold such a row). Each row keeps
    one form or the other by its own span alone, never a later key's gate: causal to the bit."""
    inside = G_rows >= -FACTOR_SPAN  # (B, H, N, c) rows whose factors stay in range
    wide = ~inside[..., -1]  # (B, H, N) chunks with a row out of range (G falls along the chunk: the last one)
    if not wide.any():
        return out
    at = wide.nonzero(as_tuple=True)  # the wide chunks' (b, h, n) indices
    return out.index_put(at, torch.where(inside[at][..., None], out[at], exact(at)))  # far rows replaced
