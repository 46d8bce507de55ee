"""Based's Taylor linear attention, chunked, with the scores inside a chunk taken from the
f-dimensional dot product instead of the 1 + f + f^2 features (as fla's parallel_based):

    phi(q).phi(k) = 1 + s + s^2 / 2,   s = q.k / sqrt(f)          (2nd-order Taylor map of exp(s))
    o_i = sum_{j<=i} (phi(q_i).phi(k_j)) v_j / (sum_{j<=i} phi(q_i).phi(k_j) + eps)

Inside a chunk of c positions: the (c, c) scores above, 2 c f FLOPs per token and head
instead of 2 c (1 + f + f^2) (f = 16: 17x fewer). Across chunks: the carried state
S = sum_j phi(k_j) [v_j, 1]^T over the features, as in ``attnbench.linear_attention``, read by
phi(q_i). Training from the empty state with T <= c (the CPU suites' T 64, c 64) needs no
features at all. The same function serves training and decoding (``LinearState`` in, a new
one out; the given one is never modified). fp32 with autocast off (float64 when given).
"""

from __future__ import annotations

from typing import overload

import torch
import torch.nn.functional as F

from attnbench import LinearState, linear_init_state
from attnbench.plugins.linear import taylor_features


def _chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, T, e) -> (B, H, N, c, e), the tail padded with zeros. A zero key still scores 1,
    but padded keys sit after every real query (the causal mask drops them) and their value
    rows [v, 1] are all zero (they add nothing to a chunk's sum)."""
    B, H, T, e = x.shape
    N = -(-T // c)
    return F.pad(x, (0, 0, 0, N * c - T)).reshape(B, H, N, c, e)


def taylor_scores(qc: torch.Tensor, kc: torch.Tensor) -> torch.Tensor:
    """phi(q_i).phi(k_j) for j <= i (else 0) from the f-dim dot product: (..., c, f) x 2 -> (..., c, c)."""
    f, c = qc.shape[-1], qc.shape[-2]
    s = (qc @ kc.transpose(-1, -2)) * f**-0.5  # (..., c, c) q.k / sqrt(f)
    a = 1.0 + s + 0.5 * s * s  # (..., c, c) = ((s + 1)^2 + 1) / 2 >= 1/2: no cancellation
    future = torch.ones(c, c, dtype=torch.bool, device=qc.device).triu(1)  # (c, c) True where j > i
    return a.masked_fill(future, 0.0)  # (..., c, c) causal


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
    out_dtype, (B, H, T, f), h = v.dtype, qf.shape, v.shape[-1]
    dt = torch.float64 if torch.float64 in (qf.dtype, kf.dtype, v.dtype) else torch.float32
    with torch.autocast(v.device.type, enabled=False):  # fp32 (fp64): the state sums the whole sequence
        c = min(chunk, T)
        qc, kc = _chunks(qf.to(dt), c), _chunks(kf.to(dt), c)  # (B, H, N, c, f)
        vx = _chunks(F.pad(v.to(dt), (0, 1), value=1.0), c)  # (B, H, N, c, h+1) [v, 1]: numerator and normaliser
        num = taylor_scores(qc, kc) @ vx  # (B, H, N, c, h+1) inside each chunk
        new = None
        if state is not None or c < T:  # a carried state: the features, over chunks
            F_ = 1 + f + f * f
            start = state if state is not None else linear_init_state(B, H, F_, h, v.device, dt)
            s0 = torch.cat([start.s, start.z[..., None]], dim=-1).to(dt)  # (B, H, F, h+1) [S_0, z_0]
            kv = taylor_features(kc).transpose(-1, -2) @ vx  # (B, H, N, F, h+1) chunk sums; padded rows of vx are 0
            incl = s0[:, :, None] + kv.cumsum(dim=2)  # (B, H, N, F, h+1) state after chunk n
            before = torch.cat([s0[:, :, None], incl[:, :, :-1]], dim=2)  # (B, H, N, F, h+1) entering chunk n
            num = num + taylor_features(qc) @ before  # (B, H, N, c, h+1) + the carried state
            if state is not None:
                final = incl[:, :, -1]  # (B, H, F, h+1)
                new = LinearState(final[..., :h].contiguous(), final[..., h].contiguous())
        o = num[..., :h] / (num[..., h:] + eps)  # (B, H, N, c, h) eps after the dot product
    return o.flatten(2, 3)[:, :, :T].to(out_dtype), new
