"""Based's Taylor linear attention, chunked, with the scores inside a chunk taken from the
f-dimensional dot product instead of the 1 + f + f^2 features (as fla's parallel_based):

    phi(q).phi(k) = 1 + s + s^2 / 2,   s = q.k / sqrt(f)          (2nd-order Taylor map of exp(s))
    o_i = sum_{j<=i} (phi(q_i).phi(k_j)) v_j / (sum_{j<=i} phi(q_i).phi(k_j) + eps)

Inside a chunk of c positions: the (c, c) scores above, 2 c f FLOPs per token and head
instead of 2 c (1 + f + f^2) (f = 16: 17x fewer). Across chunks: the carried state
S = sum_j phi(k_j) [v_j, 1]^T, read by phi(q_i), over the features with each unordered pair
(a, b) once (``symmetric_features``: 1 + f + f (f + 1) / 2, 153 for f = 16, not 273; the same
dot products), summed over earlier chunks by one matmul. The state handed in and out keeps
the full 1 + f + f^2 rows (what ``state_size`` counts, as the paper does), the rows of (a, b)
and (b, a) equal. Training from the empty state with T <= c (the CPU suites' T 64, c 64)
needs no features at all. The same function serves training and decoding (``LinearState``
in, a new one out; the given one is never modified). fp32 with autocast off (float64 when
given).
"""

from __future__ import annotations

from typing import overload

import torch
import torch.nn.functional as F

from attnbench import LinearState
from attnbench.plugins.recurrent.common import add_matmul, causal, chunks


def taylor_scores(qc: torch.Tensor, kc: torch.Tensor) -> torch.Tensor:
    """phi(q_i).phi(k_j) for j <= i (else 0) from the f-dim dot product: (..., c, f) x 2 -> (..., c, c)."""
    f, c = qc.shape[-1], qc.shape[-2]
    s = (qc @ kc.transpose(-1, -2)) * f**-0.5  # (..., c, c) q.k / sqrt(f)
    a = 1.0 + s + 0.5 * s * s  # (..., c, c) = ((s + 1)^2 + 1) / 2 >= 1/2: no cancellation
    return a * causal(c, a)  # (..., c, c) causal


@overload
def taylor_attention(
    qf: torch.Tensor, kf: torch.Tensor, v: torch.Tensor, state: LinearState, chunk: int, eps: float
) -> tuple[torch.Tensor, LinearState]: ...
@overload
def taylor_attention(
    qf: torch.Tensor, kf: torch.Tensor, v: torch.Tensor, state: None, chunk: int, eps: float
) -> tuple[torch.Tensor, None]: ...
def taylor_attention(
    qf: torch.Tensor, kf: torch.Tensor, v: torch.Tensor, state: LinearState | None, chunk: int, eps: float
) -> tuple[torch.Tensor, LinearState | None]:
    """qf, kf (B, H, T, f) the feature projections q~, k~; v (B, H, T, h); ``state`` the
    Taylor state (S (B, H, 1 + f + f^2, h), z (B, H, 1 + f + f^2)) or None (training from the
    empty state, no state after T wanted). Returns o (B, H, T, h) in v's dtype and the state
    after T (None when given None)."""
    out_dtype, T, f, h = v.dtype, qf.shape[2], qf.shape[3], v.shape[-1]
    dt = torch.float64 if torch.float64 in (qf.dtype, kf.dtype, v.dtype) else torch.float32
    with torch.autocast(v.device.type, enabled=False):  # fp32 (fp64): the state sums the whole sequence
        c = min(chunk, T)
        qc, kc = chunks(qf.to(dt), c), chunks(kf.to(dt), c)  # (B, H, N, c, f)
        vx = chunks(F.pad(v.to(dt), (0, 1), value=1.0), c)  # (B, H, N, c, h+1) [v, 1]: numerator and normaliser
        num = taylor_scores(qc, kc) @ vx  # (B, H, N, c, h+1) inside each chunk
        new = None
        if state is not None or c < T:  # a carried state: the features, over chunks
            kv = symmetric_features(kc) @ vx  # (B, H, N, F_s, h+1) chunk sums; padded vx rows are 0
            fold = None  # (F_s, F): only a given state needs it
            N = kv.shape[2]
            earlier = torch.ones(N, N, dtype=dt, device=v.device).tril(-1)  # (N, N) 1 where chunk m < n
            # the state entering chunk n: S_0 + sum_{m<n} kv_m, one matmul (a cumsum over the chunk
            # axis of this (F_s, h+1) state, and its backward, took 4x as long on a CPU)
            before = (earlier @ kv.flatten(-2)).unflatten(-1, kv.shape[-2:])  # (B, H, N, F_s, h+1) from S_0 = 0
            if state is not None:  # [S_0, z_0] over the full features, folded onto the symmetric ones
                fold = _fold(f, dt, v.device)
                s0 = fold @ torch.cat([state.s, state.z[..., None]], dim=-1).to(dt)  # (B, H, F_s, h+1)
                before = s0[:, :, None] + before  # (B, H, N, F_s, h+1)
            num = add_matmul(num, symmetric_features(qc).transpose(-1, -2), before)  # (B, H, N, c, h+1) + carried
            if fold is not None:
                final = fold.T @ (before[:, :, -1] + kv[:, :, -1])  # (B, H, F, h+1) on the full features, pairs split
                new = LinearState(final[..., :h].contiguous(), final[..., h].contiguous())
        o = num[..., :h] / (num[..., h:] + eps)  # (B, H, N, c, h) eps after the dot product
    return o.flatten(2, 3)[:, :, :T].to(out_dtype), new


def symmetric_features(x: torch.Tensor) -> torch.Tensor:
    """Based's Taylor map with each unordered pair once, x' = x / f^(1/4), one feature per row:
    (..., c, f) -> (..., 1 + f + f (f + 1) / 2, c), rows [1, x', x'_a^2 / sqrt 2, x'_a x'_b for a < b
    by offset b - a = 1, 2, .. (``pairs``)]. Dot products equal ``taylor_features``':
    (x'.y')^2 / 2 = sum_a x'_a^2 y'_a^2 / 2 + sum_{a<b} x'_a x'_b y'_a y'_b. Rows of c positions
    keep every pair product one contiguous pass (a feature per column took 2.8x as long, forward
    + backward, at T 8192), and the pairs of one offset are one product of two row blocks each way
    (by first index, 0.75x the time)."""
    f = x.shape[-1]
    return _SymmetricFeatures.apply((x / f**0.25).transpose(-1, -2).contiguous())  # (..., F_s, c)


class _SymmetricFeatures(torch.autograd.Function):
    """x' (..., f, c) -> its symmetric features (..., F_s, c), written into one tensor (no cat)
    and differentiated by hand: autograd's 2 (f - 1) row slices would each add a zero-filled
    gradient the size of x'."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        f = x.shape[-2]
        out = x.new_empty(*x.shape[:-2], 1 + f + f * (f + 1) // 2, x.shape[-1])  # (..., F_s, c)
        out[..., 0, :] = 1.0
        out[..., 1 : 1 + f, :] = x
        torch.mul(x, x * 2**-0.5, out=out[..., 1 + f : 1 + 2 * f, :])  # x'_a^2 / sqrt 2
        at = 1 + 2 * f
        for d in range(1, f):  # pairs (a, a + d): f - d rows, one product of two row blocks
            torch.mul(x[..., : f - d, :], x[..., d:, :], out=out[..., at : at + f - d, :])
            at += f - d
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        g, f = grads[0], x.shape[-2]  # g (..., F_s, c)
        gx = g[..., 1 : 1 + f, :] + 2**0.5 * x * g[..., 1 + f : 1 + 2 * f, :]  # (..., f, c) linear and square rows
        at = 1 + 2 * f
        for d in range(1, f):
            g_d = g[..., at : at + f - d, :]  # (..., f - d, c) the rows of x'_a x'_{a+d}
            gx[..., : f - d, :].addcmul_(g_d, x[..., d:, :])  # d/dx'_a: g x'_{a+d}
            gx[..., d:, :].addcmul_(g_d, x[..., : f - d, :])  # d/dx'_{a+d}: g x'_a
            at += f - d
        return gx


def pairs(f: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair rows' (a, b), a < b, in ``symmetric_features``' order: by offset d = b - a, then a."""
    a = torch.cat([torch.arange(f - d, device=device) for d in range(1, f)])  # (P,)
    d = torch.cat([torch.full((f - d,), d, device=device) for d in range(1, f)])  # (P,)
    return a, a + d


def _fold(f: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(F_s, F): a state over the full features (rows 1, x', x'_a x'_b / sqrt 2 for all a, b) onto
    the symmetric ones; a read only sees rows (a, b) + (b, a), so pair row = their sum / sqrt 2.
    Its transpose maps back: constant, linear and diagonal rows as they are, each pair row split
    evenly over (a, b) and (b, a)."""
    F_, F_s = 1 + f + f * f, 1 + f + f * (f + 1) // 2
    fold = torch.zeros(F_s, F_, dtype=dtype, device=device)  # (F_s, F)
    keep = torch.arange(1 + f, device=device)  # (1 + f,) the constant and linear rows
    fold[keep, keep] = 1.0
    diag = torch.arange(f, device=device)  # (f,)
    fold[1 + f + diag, 1 + f + diag * f + diag] = 1.0  # x'_a^2 / sqrt 2 in both maps
    a, b = pairs(f, device)  # (P,) pairs a < b in the symmetric map's order
    pair = 1 + 2 * f + torch.arange(a.numel(), device=device)  # (P,) their rows in the symmetric map
    fold[pair, 1 + f + a * f + b] = 2**-0.5
    fold[pair, 1 + f + b * f + a] = 2**-0.5
    return fold
