"""Log-sum-exp merged attention kernels of future attention (variants.md section 6.6).

A causal flash-style kernel in plain PyTorch that returns the output *and* its
log-sum-exp (with a recomputing backward), and a banded kernel over at most ``fd``
columns per row; ``attention/future_model.py`` joins the two parts through their log-sum-exps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# Causal kernel: query rows per block chosen so one block's scores hold about this many
# elements (2**20 fp32 = 4 MiB; 128 rows at B=1, H=4, T=2048), at least MIN_QUERY_BLOCK.
# Fewer, larger blocks mean fewer kernel launches; the masked half of the diagonal block
# wastes a fraction block/T of the score work.
SCORE_BLOCK_ELEMENTS = 2**20
MIN_QUERY_BLOCK = 16
BAND_BLOCK = 64  # rows per block of the future band: window of BAND_BLOCK + fd - 1 columns


def fp32(t: torch.Tensor) -> torch.Tensor:
    """t in at least fp32 (fp64 stays fp64): exp and log-sum-exp are not done in half."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


# ----------------------------------------------------------------------------- causal kernel


def _causal_scores(q: torch.Tensor, k: torch.Tensor, scale: float, first: int) -> torch.Tensor:
    """Scores of queries at absolute positions first.. against keys 0..n-1, -inf where j > i."""
    s = (q @ k.transpose(-1, -2)) * scale  # (B, H, bq, n)
    qpos = torch.arange(first, first + q.size(-2), device=q.device)[:, None]  # (bq, 1)
    kpos = torch.arange(k.size(-2), device=q.device)[None, :]  # (1, n)
    return s.masked_fill(kpos > qpos, float("-inf"))  # (B, H, bq, n)


def _keep(shape: torch.Size, gen: torch.Generator | None, p: float, like: torch.Tensor) -> torch.Tensor | None:
    """Dropout multiplier for one block (None without dropout), replayable from ``gen``."""
    if gen is None:
        return None
    u = torch.rand(shape, generator=gen, device=like.device, dtype=like.dtype)  # (B, H, bq, n)
    return (u >= p).to(like.dtype) / (1.0 - p)  # (B, H, bq, n) inverted dropout


def query_block_rows(batch: int, heads: int, n_keys: int) -> int:
    """Query rows per block of the causal kernel (scores of about SCORE_BLOCK_ELEMENTS)."""
    return max(MIN_QUERY_BLOCK, SCORE_BLOCK_ELEMENTS // (batch * heads * n_keys))


def _query_blocks(q: torch.Tensor, offset: int) -> list[tuple[int, int, int]]:
    """(first row, end row, keys seen) per query block of q (B, H, T, h) at offset."""
    B, H, T, _ = q.shape
    rows = query_block_rows(B, H, offset + T)
    return [(i0, min(i0 + rows, T), offset + min(i0 + rows, T)) for i0 in range(0, T, rows)]


class _CausalAttentionLSE(torch.autograd.Function):
    """o_i = sum_{j<=a_i} softmax_j(s q_i.k_j) v_j and lse_i = log sum_{j<=a_i} exp(s q_i.k_j),
    a_i = offset + i. Forward walks query blocks keeping only (o, lse); backward recomputes
    each block's probabilities from lse (FlashAttention's scheme), so no (T, T) matrix
    outlives one block. Dropout masks are replayed from ``seed`` in backward.
    """

    @staticmethod
    def forward(ctx, q, k, v, scale: float, offset: int, dropout_p: float, seed: int):
        B, H, T, h = q.shape
        out = torch.empty_like(q)  # (B, H, T, h)
        lse = q.new_empty(B, H, T)  # (B, H, T)
        gen = torch.Generator(device=q.device).manual_seed(seed) if dropout_p > 0 else None
        for i0, i1, n in _query_blocks(q, offset):
            s = _causal_scores(q[:, :, i0:i1], k[:, :, :n], scale, offset + i0)  # (B, H, bq, n)
            # Row max subtracted inside logsumexp; every row has j = i, so lse is finite.
            lse[:, :, i0:i1] = torch.logsumexp(s, dim=-1)  # (B, H, bq)
            p = torch.exp(s - lse[:, :, i0:i1, None])  # (B, H, bq, n)
            keep = _keep(p.shape, gen, dropout_p, p)
            out[:, :, i0:i1] = (p if keep is None else p * keep) @ v[:, :, :n]  # (B, H, bq, h)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (scale, offset, dropout_p, seed)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        scale, offset, dropout_p, seed = ctx.args
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        gen = torch.Generator(device=q.device).manual_seed(seed) if dropout_p > 0 else None
        for i0, i1, n in _query_blocks(q, offset):  # forward's order: same dropout masks
            qb, kb, vb, dob = q[:, :, i0:i1], k[:, :, :n], v[:, :, :n], d_out[:, :, i0:i1]
            s = _causal_scores(qb, kb, scale, offset + i0)  # (B, H, bq, n)
            p = torch.exp(s - lse[:, :, i0:i1, None])  # (B, H, bq, n) recomputed probabilities
            keep = _keep(p.shape, gen, dropout_p, p)
            dp = dob @ vb.transpose(-1, -2)  # (B, H, bq, n) dL/d(dropped p)
            if keep is not None:
                dv[:, :, :n] += (p * keep).transpose(-1, -2) @ dob  # (B, H, n, h)
                dp = dp * keep  # (B, H, bq, n)
            else:
                dv[:, :, :n] += p.transpose(-1, -2) @ dob  # (B, H, n, h)
            # dS = P (dP - rowsum(dO * O) + dlse): softmax Jacobian plus d lse / d s = P.
            delta = (dob * out[:, :, i0:i1]).sum(-1) - d_lse[:, :, i0:i1]  # (B, H, bq)
            ds = p * (dp - delta[..., None])  # (B, H, bq, n)
            dq[:, :, i0:i1] = (ds @ kb) * scale  # (B, H, bq, h)
            dk[:, :, :n] += (ds.transpose(-1, -2) @ qb) * scale  # (B, H, n, h)
        return dq, dk, dv, None, None, None, None


def causal_attention_lse(q, k, v, offset: int = 0, dropout_p: float = 0.0, seed: int = 0):
    """Causal attention of q (B, H, T, h) at positions offset.. over k, v (B, H, >=offset+T, h).

    Returns (out (B, H, T, h), lse (B, H, T)); differentiable in both. fp32 inputs expected.
    """
    scale = 1.0 / math.sqrt(q.size(-1))
    return _CausalAttentionLSE.apply(q, k, v, scale, offset, float(dropout_p), int(seed))


# ----------------------------------------------------------------------------- future band


def _windows(cols: torch.Tensor, start: int, n_blocks: int, blk: int, width: int) -> torch.Tensor:
    """Windows cols[..., start + b*blk : start + b*blk + width] for b < n_blocks, as a view.

    cols (..., P) -> (..., n_blocks, width); columns past P are zeros (masked by the caller).
    """
    need = (n_blocks - 1) * blk + width
    part = cols[..., start : start + need]  # (..., <= need)
    part = F.pad(part, (0, need - part.size(-1)))  # (..., need)
    return part.unfold(-1, width, blk)  # (..., n_blocks, width)


def band_scores(
    q: torch.Tensor, k_cols: torch.Tensor, v_cols: torch.Tensor, first_pos: int, offset: int, last: int, fd: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and values of each row's band: row i (position a = offset + i) sees the
    positions a+1..min(a+fd, last) of k_cols/v_cols (..., h, P), whose column c holds
    position c + first_pos.

    Returns s (B, H, nb, blk, W) in blocks of ``blk`` rows, -inf outside the band, and the
    values (..., nb, W, h), W = blk + fd - 1: row r of block b, window column w is position
    offset + b*blk + 1 + w, i.e. band offset m = w - r.
    """
    B, H, T, h = q.shape
    blk = min(T, BAND_BLOCK)
    nb = -(-T // blk)
    W = blk + fd - 1
    start = offset + 1 - first_pos  # column of position offset + 1
    kw = _windows(k_cols, start, nb, blk, W).movedim(-3, -2)  # (..., nb, h, W)
    vw = _windows(v_cols, start, nb, blk, W).movedim(-3, -1)  # (..., nb, W, h)
    # Rows padded up to nb * blk; their outputs are dropped by _unblocked.
    qb = F.pad(q, (0, 0, 0, nb * blk - T)).view(B, H, nb, blk, h)  # (B, H, nb, blk, h)
    s = (qb @ kw) * (1.0 / math.sqrt(h))  # (B, H, nb, blk, W)
    r = torch.arange(blk, device=q.device)[:, None]  # (blk, 1)
    w = torch.arange(W, device=q.device)[None, :]  # (1, W)
    pos = offset + 1 + blk * torch.arange(nb, device=q.device)[:, None, None] + w  # (nb, 1, W)
    valid = (w >= r) & (w < r + fd) & (pos <= last)  # (nb, blk, W)
    return s.masked_fill(~valid, float("-inf")), vw


def _blocked(t: torch.Tensor, nb: int, blk: int) -> torch.Tensor:
    """(B, H, T) -> (B, H, nb, blk), zero-padded rows."""
    return F.pad(t, (0, nb * blk - t.size(-1))).view(*t.shape[:-1], nb, blk)


def _unblocked(t: torch.Tensor, T: int) -> torch.Tensor:
    """(B, H, nb, blk, ...) -> (B, H, T, ...), dropping padded rows."""
    return t.flatten(2, 3)[:, :, :T]


def band_attend(
    s: torch.Tensor, vw: torch.Tensor, lse_c: torch.Tensor, T: int, dropout_p: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Join a band to a causal part with log-sum-exp lse_c (B, H, T).

    Returns out_band (B, H, T, h) = sum_band exp(s - lse_all) v, with lse_all (B, H, T) the
    log-sum-exp over causal and band columns together (dropout on the band probabilities).
    """
    nb, blk = s.shape[2], s.shape[3]
    lse_cb = _blocked(lse_c, nb, blk)  # (B, H, nb, blk) padded rows get 0: finite, dropped
    # Joint log-sum-exp over [causal | band]: the finite causal term keeps rows whose band
    # is empty (all -inf) finite in value and gradient.
    lse_all = torch.logsumexp(torch.cat([lse_cb[..., None], s], dim=-1), dim=-1)  # (B, H, nb, blk)
    p = torch.exp(s - lse_all[..., None])  # (B, H, nb, blk, W) zero outside the band
    p = F.dropout(p, dropout_p) if dropout_p > 0 else p  # (B, H, nb, blk, W)
    return _unblocked(p @ vw, T), _unblocked(lse_all, T)  # (B, H, T, h), (B, H, T)


# ----------------------------------------------------------------------------- the mixer
