"""Chunked scan with a scalar decay per head and position: Mamba2's SSD (Dao & Gu 2024,
"Transformers are SSMs", sec. 6), the state-space dual of masked attention:

    S_t = a_t S_{t-1} + b_t x_t^T,   y_t = S_t^T c_t       (a_t = exp(log_a_t) in (0, 1])

i.e. y_i = sum_{j<=i} exp(sum_{j<l<=i} log_a_l) (c_i . b_j) x_j + exp(sum_{l<=i} log_a_l) S_0^T c_i.
Inside a chunk of c positions the masked c x c form, its decays one (c, c) matrix per head
(``decays.decay_matrix``: exponents from float64 running sums rounded once, a backward that
sums each pair over the steps it spans; the factorised exp(G_i) exp(-G_j) it replaced put
A_log's fp32 gradient 7.8x further from float64 than fla's fp32 recurrence, issue 57);
across chunks the carried state, by a loop over chunks, its decays sums over their own spans
(never a difference of prefix sums over the sequence, which cancels in fp32). fp32 with
autocast off, float64 when given.
"""

from __future__ import annotations

from typing import overload

import torch

from attnbench.plugins.recurrent.common import add_matmul
from attnbench.plugins.recurrent.decays import after_sums, decay_matrix, since_start

# re-exported for older checkouts' modules (see common.py)
from attnbench.plugins.recurrent.decays import segment_sums as segment_sums
from attnbench.plugins.recurrent.flops import ssd_flops_per_token as ssd_flops_per_token


def ssd_init_state(
    batch: int, n_head: int, d_state: int, head_dim: int, device=None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """S_0 = 0 (B, H, N_s, P): fp32 unless float64 is asked (a running sum)."""
    dt = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.zeros(batch, n_head, d_state, head_dim, device=device, dtype=dt)


@overload
def ssd_scan(
    c: torch.Tensor,
    b: torch.Tensor,
    x: torch.Tensor,
    log_a: torch.Tensor,
    state: torch.Tensor,
    chunk: int,
    dt: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def ssd_scan(
    c: torch.Tensor,
    b: torch.Tensor,
    x: torch.Tensor,
    log_a: torch.Tensor,
    state: None,
    chunk: int,
    dt: torch.Tensor | None = None,
) -> tuple[torch.Tensor, None]: ...
def ssd_scan(
    c: torch.Tensor,
    b: torch.Tensor,
    x: torch.Tensor,
    log_a: torch.Tensor,
    state: torch.Tensor | None,
    chunk: int,
    dt: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """c, b (B, H, T, N_s) (Mamba2's C and dt * B), x (B, H, T, P), log_a (B, H, T) <= 0,
    state S_0 (B, H, N_s, P). Returns y (B, H, T, P) and the state after T (a new tensor; the
    given one is never modified), both in the working dtype (fp32, float64 when given). y stays
    out of half precision: it is unnormalised until Mamba2's gated RMSNorm, and its fp16 copy
    overflowed at weights x4 in the gate (an H200, 2026-11-27).
    state None: training from S_0 = 0, the state after T not wanted (None is returned). Up to
    one chunk (T <= chunk) that is the masked form alone: no chunk summary, no carried state.
    dt (B, H, T): c and b are then Mamba2's per group, (B, G, T, N_s) with G dividing H (head h
    reads group h // (H / G)), and head h's b is dt_h * B: the scores C B^T are computed once
    per group, not once per head (as Mamba2's own kernel does)."""
    T = x.shape[2]
    fp = torch.float64 if torch.float64 in (c.dtype, b.dtype, x.dtype, log_a.dtype) else torch.float32
    if state is None and chunk >= T:  # one chunk holds the whole sequence: the pairwise decays, fewer
        # and larger ops than the factorised form (which ran the findings shape's step 1.11x slower)
        with torch.autocast(x.device.type, enabled=False):
            c, b, x, log_a = c.to(fp), b.to(fp), x.to(fp), log_a.to(fp)
            decay = decay_matrix(log_a)  # (B, H, T, T) exp(sum_{j<l<=i} log_a_l), 0 for j > i
            decay = decay if dt is None else decay * dt.to(fp)[..., None, :]  # (B, H, T, T) times dt_j
            return _per_head(c @ b.transpose(-1, -2), decay) @ x, None  # (B, H, T, P)
    B, H, _, P = x.shape
    start = state if state is not None else ssd_init_state(B, H, c.shape[-1], P, x.device, fp)  # (B, H, N_s, P)
    with torch.autocast(x.device.type, enabled=False):  # the state sums the whole sequence
        n = min(chunk, T)
        N = -(-T // n)
        pad = N * n - T  # padded tail: b = x = 0 and log_a = 0 add nothing
        groups = c.shape[1]
        cc, bc = (_pad_time(t.to(fp), pad, 2).unflatten(2, (N, n)) for t in (c, b))  # (B, G, N, n, N_s)
        xc = _by_group(_pad_time(x.to(fp).transpose(1, 2), pad, 1).unflatten(1, (N, n)), groups)  # (B, G, N, n, H/G, P)
        ac = _pad_time(log_a.to(fp), pad, 2).unflatten(2, (N, n))  # (B, H, N, n)
        sc = torch.ones_like(ac) if dt is None else _pad_time(dt.to(fp), pad, 2).unflatten(2, (N, n))  # (B, H, N, n)
        gamma = since_start(ac, -1)[1]  # (B, H, N, n) decay from the chunk's start through i
        to_end = torch.exp(after_sums(ac[..., None])[..., 0]) * sc  # (B, H, N, n) key j to the chunk's end (dt_j)
        # Across chunks a group's H/G heads sit side by side in the columns of one state (B, G, ., H/G P),
        # so each product with the group's shared b or c is one matmul for all of them, and the
        # decays scale x and the output rows (P wide), never a per-head copy of b or c (N_s wide).
        summary = bc.transpose(-1, -2) @ (xc * _scales(to_end, groups)).flatten(-2)  # (B, G, N, N_s, H/G P) b^T x
        through = gamma[..., -1].unflatten(1, (groups, -1)).transpose(2, 3)  # (B, G, N, H/G) across a chunk
        s, before = start.to(fp).unflatten(1, (groups, -1)).transpose(2, 3), []  # (B, G, N_s, H/G, P) S_0, a view
        for a_m, u_m in zip(through.unbind(2), summary.unbind(2), strict=True):  # unbound once, never indexed
            before.append(s)  # S_{m+1} = through_m S_m + U_m: O(N), not an (N+1) x (N+1) carry
            s = torch.addcmul(u_m.unflatten(-1, (-1, P)), a_m[:, :, None, :, None], s)  # (B, G, N_s, H/G, P) one op
        states = torch.stack(before, dim=2).flatten(-2)  # (B, G, N, N_s, H/G P) S before each chunk
        carried = cc @ states  # (B, G, N, n, H/G P) c_i^T S, not yet decayed to i
        y = _inside(cc, bc, xc, carried, ac, gamma, sc)  # (B, H, N, n, P) chunk and carried state, decayed to i
        y = y.flatten(2, 3)[:, :, :T]  # (B, H, T, P)
        final = s.transpose(2, 3).flatten(1, 2)  # (B, H, N_s, P) a new tensor
    return y, (final if state is not None else None)


def _pad_time(t: torch.Tensor, pad: int, dim: int) -> torch.Tensor:
    """Zeros after the last position of time axis ``dim`` (the layout kept; no copy when pad is 0)."""
    return t if pad == 0 else torch.cat([t, t.new_zeros(*t.shape[:dim], pad, *t.shape[dim + 1 :])], dim=dim)


def _by_group(x: torch.Tensor, groups: int) -> torch.Tensor:
    """x (B, N, n, H, P), time-major -> (B, G, N, n, H/G, P), head h = g H/G + k: a view. Where x is
    time-major in memory (Mamba2's x is a slice of the convolution's output) and G is 1, a group's
    heads side by side, (B, G, N, n, H/G P), is a view too, and so is the output the scan returns."""
    return x.unflatten(3, (groups, -1)).permute(0, 3, 1, 2, 4, 5)  # (B, G, N, n, H/G, P)


def _scales(per_head: torch.Tensor, groups: int) -> torch.Tensor:
    """A factor per head and position (B, H, N, n) -> (B, G, N, n, H/G, 1), to scale x by groups."""
    return per_head.unflatten(1, (groups, -1)).permute(0, 1, 3, 4, 2)[..., None]


def _heads(by_group: torch.Tensor) -> torch.Tensor:
    """(B, G, N, n, H/G, P) -> (B, H, N, n, P), head h = g H/G + k: a view when G is 1."""
    return by_group.permute(0, 1, 4, 2, 3, 5).flatten(1, 2)


def _inside(
    cc: torch.Tensor,
    bc: torch.Tensor,
    xc: torch.Tensor,
    carried: torch.Tensor,
    ac: torch.Tensor,
    gamma: torch.Tensor,
    sc: torch.Tensor,
) -> torch.Tensor:
    """y_i = exp(G_i) c_i^T S + sum_{j<=i} (c_i . b_j) exp(sum_{j<l<=i} log_a_l) dt_j x_j inside each
    chunk: cc, bc (B, G, N, n, N_s) per group, xc (B, G, N, n, H/G, P), carried = c_i^T S (B, G, N,
    n, H/G P), the log decays ac, gamma = exp(G) and the scales dt sc (B, H, N, n). C B^T once per
    group, times each head's decay matrix and dt, then one matmul per head that adds the carried
    state decayed to i."""
    scores = cc @ bc.transpose(-1, -2)  # (B, G, N, n, n) c_i . b_j
    weights = _per_head(scores, decay_matrix(ac) * sc[..., None, :])  # (B, H, N, n, n) 0 for j > i
    carried_h, x_h = _heads(carried.unflatten(-1, xc.shape[-2:])), _heads(xc)  # (B, H, N, n, P) views when G is 1
    return add_matmul(carried_h * gamma[..., None], weights, x_h)  # (B, H, N, n, P)


def _per_head(shared: torch.Tensor, per_head: torch.Tensor) -> torch.Tensor:
    """shared (B, G, ...) times per_head (B, H, ...), G dividing H, head h with group h // (H / G):
    a broadcast view, no copy of the shared tensor per head."""
    G, H = shared.shape[1], per_head.shape[1]
    if G == H:
        return shared * per_head
    grouped = shared.unsqueeze(2) * per_head.unflatten(1, (G, H // G))  # (B, G, H / G, ...)
    return grouped.flatten(1, 2)  # (B, H, ...)
