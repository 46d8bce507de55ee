"""Chunkwise causal scans shared by the ``linear`` and ``heinsen`` attention plugins.

Both variants are linear attention, o_i = phi(q_i)^T S_i / (phi(q_i)^T z_i [+ eps]) with
S_i = sum_{j<=i} phi(k_j) v_j^T and z_i = sum_{j<=i} phi(k_j). The sequence is cut into
chunks of c positions: inside a chunk the masked quadratic form (c x c scores), across
chunks a carried state, so training memory is O(T (h + c) + (T / c) h_k h_v) per head
instead of the O(T h_k h_v) of a cumulative sum of outer products.

The same functions serve training (no initial state) and decoding (``step`` passes the
previous state and gets a new one back; the tensors it was given are never modified).
Everything runs in fp32 with autocast disabled (float64 when given float64, for reference
runs): the state is a sum over the whole sequence, and the log-space variant
exponentiates, which half precision cannot hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import torch
import torch.nn.functional as F

# Key and value factors exp(x - ref) are capped at exp(LEVEL) and the references are LEVEL
# apart: every factor a row reads stays inside the normal fp32 range (e^-87 .. e^88).
LEVEL = 40.0
# Inside a chunk the key references are LEVEL_K apart (key factor < e^LEVEL_K), so a query
# factor too small to pass gradient (see CUT) belongs to pair terms below e^(LEVEL_K - CUT).
LEVEL_K = 5.0
# Query factors, pair weights, chunk summaries and numerators below exp(-CUT) relative to
# L_i and their references pass no gradient, their values are kept: 1 / x in the backward
# then stays below e^CUT, and no inf meets a 0 (NaN). (Dropping the values too, as before
# issue 28, lost terms that large key or value factors make count.)
CUT = {torch.float32: 70.0, torch.float64: 700.0}
# Rows are shifted by L_i - HEADROOM, not L_i: pair weights up to e^HEADROOM, so a row whose
# largest term pairs a small weight with a large value stays above fp32's underflow.
HEADROOM = 20.0


def _cut_exp(x: torch.Tensor, cut: float) -> torch.Tensor:
    """exp(x); no gradient where x <= -cut (``where``, not a product: an inf meets no 0)."""
    e = torch.exp(x)  # same shape as x
    return torch.where(x > -cut, e, e.detach())


def _cut(x: torch.Tensor, cut: float) -> torch.Tensor:
    """x; no gradient where x <= exp(-cut)."""
    return torch.where(x > math.exp(-cut), x, x.detach())


def _cut_log(x: torch.Tensor, cut: float, shift: float = 0.0) -> torch.Tensor:
    """log x - shift for x >= 0, x floored at tiny; gradient only where x > exp(-cut), so
    1 / x <= e^cut. Taken as log(x e^-shift) where that is above exp(-cut): a log near 0
    rounds finer than one near ``shift``."""
    low, tiny = math.exp(-cut), torch.finfo(x.dtype).tiny
    scaled = x * math.exp(-shift)  # same shape as x
    near_0 = scaled > low  # same shape as x
    log_x = torch.where(near_0, scaled, x.clamp_min(tiny)).log() - torch.where(near_0, 0.0, shift)  # one log
    return torch.where(x > low, log_x, log_x.detach())


@dataclass(frozen=True)
class LinearState:
    """Recurrent state of causal linear attention, one sequence per batch row (fp32)."""

    s: torch.Tensor  # (B, H, h_k, h_v) sum_j phi(k_j) v_j^T
    z: torch.Tensor  # (B, H, h_k) sum_j phi(k_j)


@dataclass(frozen=True)
class LogState:
    """Recurrent state of log-space (phi = exp) attention: log S, log z and the running key
    maximum the stabilisers need (fp32, or fp64)."""

    log_s: torch.Tensor  # (B, H, h_k, h_v) log sum_j exp(k_jd + log V_je); -inf before any token
    log_z: torch.Tensor  # (B, H, h_k) log sum_j exp(k_jd); -inf before any token
    m_k: torch.Tensor  # (B, H, h_k) running max of k~_jd = k_jd - kappa_j per channel; -inf before any token


def linear_init_state(
    batch: int, n_head: int, h_k: int, h_v: int, device=None, dtype: torch.dtype | None = None
) -> LinearState:
    kw = dict(device=device, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    return LinearState(
        torch.zeros(batch, n_head, h_k, h_v, **kw),  # (B, H, h_k, h_v)
        torch.zeros(batch, n_head, h_k, **kw),
    )  # (B, H, h_k)


def log_init_state(
    batch: int, n_head: int, h_k: int, h_v: int, device=None, dtype: torch.dtype | None = None
) -> LogState:
    kw = dict(device=device, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    ninf = float("-inf")
    return LogState(
        torch.full((batch, n_head, h_k, h_v), ninf, **kw),  # (B, H, h_k, h_v)
        torch.full((batch, n_head, h_k), ninf, **kw),  # (B, H, h_k)
        torch.full((batch, n_head, h_k), ninf, **kw),
    )  # (B, H, h_k)


def _compute_dtype(*xs: torch.Tensor) -> torch.dtype:
    """float64 when any input is float64 (reference runs, the gate), else fp32."""
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def _chunks(x: torch.Tensor, c: int, pad: float) -> torch.Tensor:
    """(B, H, T, e) -> (B, H, N, c, e), N = ceil(T / c), the tail chunk filled with ``pad``."""
    B, H, T, e = x.shape
    N = -(-T // c)
    if N * c != T:
        x = F.pad(x, (0, 0, 0, N * c - T), value=pad)  # (B, H, N*c, e)
    return x.reshape(B, H, N, c, e)


def _unchunk(y: torch.Tensor, T: int) -> torch.Tensor:
    """(B, H, N, c, e) -> (B, H, T, e), dropping the padded tail."""
    B, H, N, c, e = y.shape
    return y.reshape(B, H, N * c, e)[:, :, :T]


def _with_ones(v: torch.Tensor) -> torch.Tensor:
    """Append a column of ones: one matmul then yields the numerator and the normaliser."""
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # (..., h_v + 1)


def _future(c: int, device: torch.device) -> torch.Tensor:
    return torch.ones(c, c, dtype=torch.bool, device=device).triu(1)  # (c, c) True where j > i


def _exclusive(incl: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """Shift an inclusive scan over chunks (dim 2) by one, ``first`` (B, H, 1, ...) in front."""
    return torch.cat([first, incl[:, :, :-1]], dim=2)


@overload
def linear_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, state: LinearState, chunk: int, eps: float
) -> tuple[torch.Tensor, LinearState]: ...
@overload
def linear_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, state: None, chunk: int, eps: float
) -> tuple[torch.Tensor, None]: ...
def linear_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, state: LinearState | None, chunk: int, eps: float
) -> tuple[torch.Tensor, LinearState | None]:
    """Causal linear attention, chunkwise (Katharopoulos et al. 2020, eq. 9 with the state):

        o_i = phi(q_i)^T (S_0 + sum_{j<=i} phi(k_j) v_j^T) / (phi(q_i)^T (z_0 + sum_{j<=i} phi(k_j)) + eps)

    phi_q, phi_k (B, H, T, h_k) > 0 and v (B, H, T, h_v); returns o (B, H, T, h_v) in v's
    dtype and the state after position T (float64 when given float64, else fp32). eps is
    added after the dot product. Gradients
    come from ``_LinearChunked``'s hand-written backward, which keeps only the inputs and the
    carried states and recomputes the c x c scores.
    state None: training from the empty state, the state after T not wanted (None is
    returned for it). Up to one chunk (T <= chunk, the CPU suites' regime) that is the
    masked quadratic form alone: no chunk summary, no carried-state read, no final state.
    """
    out_dtype, (B, H, T, h_k), dt = v.dtype, phi_k.shape, _compute_dtype(phi_q, phi_k, v)
    if state is None and chunk >= T:  # one chunk holds the whole sequence
        with torch.autocast(v.device.type, enabled=False):
            return _one_chunk(phi_q.to(dt), phi_k.to(dt), v.to(dt), eps).to(out_dtype), None
    start = state if state is not None else linear_init_state(B, H, h_k, v.shape[-1], v.device, dt)
    with torch.autocast(v.device.type, enabled=False):  # fp32 (or fp64): the state sums the whole sequence
        c = min(chunk, T)
        fq = _chunks(phi_q.to(dt), c, 0.0)  # (B, H, N, c, h_k)
        fk = _chunks(phi_k.to(dt), c, 0.0)  # (B, H, N, c, h_k) zero rows add nothing
        vc = _chunks(v.to(dt), c, 0.0)  # (B, H, N, c, h_v)
        s0 = torch.cat([start.s, start.z[..., None]], dim=-1).to(dt)  # (B, H, h_k, h_v+1) [S_0, z_0]
        o, final = _LinearChunked.apply(fq, fk, vc, s0, eps)  # (B, H, N, c, h_v), (B, H, h_k, h_v+1)
        h_v = vc.shape[-1]
        new = LinearState(final[..., :h_v].contiguous(), final[..., h_v].contiguous())  # new tensors,
    return _unchunk(o, T).to(out_dtype), (new if state is not None else None)  # never the caller's


def _one_chunk(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, eps: float) -> torch.Tensor:
    """The quadratic form from the empty state, autograd's own backward (T <= chunk: the
    (T, T) scores are the chunk's): fq, fk (B, H, T, h_k), v (B, H, T, h_v) -> o (B, H, T, h_v)."""
    scores = (fq @ fk.transpose(-1, -2)).masked_fill(_future(fq.shape[2], fq.device), 0.0)  # (B, H, T, T) causal
    num = scores @ _with_ones(v)  # (B, H, T, h_v+1) [numerator, normaliser]
    h_v = v.shape[-1]
    return num[..., :h_v] / (num[..., h_v:] + eps)  # (B, H, T, h_v) eps after the dot product


class _LinearChunked(torch.autograd.Function):
    """Chunked causal linear attention with the normaliser as a ones column of V:

        A_n = (Q_n K_n^T) * M            (c x c scores inside chunk n, M causal incl. diagonal)
        S'_n = S'_0 + sum_{m<n} K_m^T [V_m, 1]                  (carried state, (h_k, h_v+1))
        [num, den] = A_n [V_n, 1] + Q_n S'_n,   O_n = num / (den + eps)

    Saves Q, K, V, the carried states S'_n and den; backward recomputes A_n, so training
    memory stays O(T (h + c)) per head plus O(T / c h_k h_v) for the states.
    """

    @staticmethod
    def forward(ctx, fq, fk, vc, s0, eps: float):
        vx = _with_ones(vc)  # (B, H, N, c, h_v+1)
        scores = (fq @ fk.transpose(-1, -2)).masked_fill_(_future(fq.shape[3], fq.device), 0.0)  # (B, H, N, c, c)
        incl = (fk.transpose(-1, -2) @ vx).cumsum(dim=2)  # (B, H, N, h_k, h_v+1) fp32 prefix over chunks
        before = s0[:, :, None] + _exclusive(incl, torch.zeros_like(incl[:, :, :1]))  # (B, H, N, h_k, h_v+1)
        num = scores @ vx  # (B, H, N, c, h_v+1) intra-chunk
        num += fq @ before  # (B, H, N, c, h_v+1) + carried state
        del scores
        h_v = vc.shape[-1]
        den = num[..., h_v:] + eps  # (B, H, N, c, 1) eps after the dot product
        o = num[..., :h_v] / den  # (B, H, N, c, h_v)
        ctx.save_for_backward(fq, fk, vc, before, den, o)
        return o, s0 + incl[:, :, -1]  # (B, H, N, c, h_v), (B, H, h_k, h_v+1)

    @staticmethod
    def backward(ctx, d_o, d_final):
        fq, fk, vc, before, den, o = ctx.saved_tensors
        vx = _with_ones(vc)  # (B, H, N, c, h_v+1)
        causal = ~_future(fq.shape[3], fq.device)  # (c, c) True where j <= i
        d_num = d_o / den  # (B, H, N, c, h_v) through o = num / den
        d_den = -(d_o * o).sum(-1, keepdim=True) / den  # (B, H, N, c, 1)
        d_numx = torch.cat([d_num, d_den], dim=-1)  # (B, H, N, c, h_v+1)
        del d_num, d_den
        # num = A V' + Q S': through the scores A (recomputed) and the carried state.
        d_scores = (d_numx @ vx.transpose(-1, -2)) * causal  # (B, H, N, c, c)
        d_q = d_scores @ fk + d_numx @ before.transpose(-1, -2)  # (B, H, N, c, h_k)
        d_k = d_scores.transpose(-1, -2) @ fq  # (B, H, N, c, h_k)
        del d_scores
        scores = (fq @ fk.transpose(-1, -2)) * causal  # (B, H, N, c, c) recomputed
        d_vx = scores.transpose(-1, -2) @ d_numx  # (B, H, N, c, h_v+1)
        del scores
        d_before = fq.transpose(-1, -2) @ d_numx  # (B, H, N, h_k, h_v+1)
        # S'_n sums the chunks m < n (and the final state all of them): chunk m receives the
        # gradients of every later state, a reverse exclusive prefix sum, plus the final's.
        rev = d_before.flip(2).cumsum(2).flip(2)  # (B, H, N, h_k, h_v+1) sum over n >= m
        later = _exclusive_rev(rev)  # (B, H, N, h_k, h_v+1) sum over n > m
        if d_final is not None:
            later = later + d_final[:, :, None]
        d_k += vx @ later.transpose(-1, -2)  # (B, H, N, c, h_k)
        d_vx += fk @ later  # (B, H, N, c, h_v+1)
        d_s0 = rev[:, :, 0] + (d_final if d_final is not None else 0)  # (B, H, h_k, h_v+1)
        return d_q, d_k, d_vx[..., :-1], d_s0, None


def _exclusive_rev(rev: torch.Tensor) -> torch.Tensor:
    """Sums over n > m from sums over n >= m (dim 2): shift left by one, zeros at the end."""
    return torch.cat([rev[:, :, 1:], torch.zeros_like(rev[:, :, :1])], dim=2)


def _intra_scores(qc: torch.Tensor, kc: torch.Tensor, mk: torch.Tensor, row: torch.Tensor, cut: float) -> torch.Tensor:
    """Pair weights inside each chunk, exp(LSE_d(q_id + k~_jd) - row_i): (B, H, N, c, c),
    future pairs included. Key reference r_d = m at the chunk's first row, LEVEL_K higher
    per level for channels whose max grew since: query factor exp(q_id + r_d - row_i) and
    key factor exp(k~_jd - r_d) < e^LEVEL_K for j <= i: a query factor below e^-cut (no
    gradient) belongs to pair terms below e^(LEVEL_K - cut). Higher levels run only on the
    chunks that need them (usually the first: m grows fastest at the start)."""
    B, H, N, c, hk = qc.shape
    qc, kc, mk, row = (t.reshape(B * H * N, c, -1) for t in (qc, kc, mk, row))  # (BHN, c, .) chunks as a batch
    with torch.no_grad():
        base = mk[:, :1]  # (BHN, 1, h_k) m at each chunk's first row
        level = torch.div(mk - base, LEVEL_K, rounding_mode="floor")  # (BHN, c, h_k) growth since, in levels
        top = level.amax(dim=(1, 2))  # (BHN,) highest level per chunk

    def level_part(lvl: int, at: slice | torch.Tensor) -> torch.Tensor:
        ref = base[at] + lvl * LEVEL_K  # (M, 1, h_k)
        q_log = torch.where(level[at] == lvl, qc[at] + ref - row[at], float("-inf"))  # (M, c, h_k)
        k_f = torch.exp((kc[at] - ref).clamp_max(LEVEL_K))  # (M, c, h_k) cap hits only j > i
        return _cut_exp(q_log, cut) @ k_f.transpose(-1, -2)  # (M, c, c)

    scores = level_part(0, slice(None))  # (BHN, c, c) every chunk has rows at level 0
    for lvl in range(1, int(top.max()) + 1):
        at = (top >= lvl).nonzero().squeeze(1)  # (M,) chunks with a row at lvl
        scores = scores.index_add_(0, at, level_part(lvl, at))  # (BHN, c, c) in place: no copy
    return scores.view(B, H, N, c, c)


def log_attention(
    q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor, state: LogState, chunk: int
) -> tuple[torch.Tensor, LogState]:
    """Heinsen's causal log-space attention (arXiv 2404.05843, eq. 12-13), chunkwise:

        o_i = log sum_{j<=i} exp(LSE_d(q_id + k_jd) + log V_j) - log sum_{j<=i} exp(LSE_d(q_id + k_jd))

    i.e. the log of linear attention with phi = exp and values exp(log V). q, k (B, H, T,
    h_k), log_v (B, H, T, h_v); returns o (B, H, T, h_v) in log_v's dtype and the state.
    Computes in float64 when given float64, else fp32.

    Stabilisers (detached; each cancels exactly; every one a row reads is causal):
    * per key token kappa_j = max_d k_jd moves into its values: k~_jd = k_jd - kappa_j <= 0
      and log V~_je = log V_je + kappa_j; the normaliser is one more value column, log
      value kappa_j. (A token with tiny keys and a huge log V keeps its product.)
    * keys: the row shift L_i - HEADROOM, L_i = max_d(q_id + m_id), m = running max of k~
      per channel; key references r_d = m at the chunk's first position, raised in steps
      of LEVEL_K inside the chunk for channels whose max grew: query factor <= e^HEADROOM,
      key factor < e^LEVEL_K (``_intra_scores``).
    * values: per column the same scheme: reference = max of everything before the chunk
      and of its first position, LEVEL higher for rows whose running max outgrew it.
    * across chunks the state is a log-space sum (logcumsumexp over T / c summaries).
    No value is cut; terms below exp(-CUT) pass no gradient (see CUT).
    fp32 against float64 (benchmarks/bench_heinsen_fp32.py: h = 32, T = 512, chunks 16
    and 64, 3 draws; tests/test_heinsen_fp32.py), max |o - o64| / max(|o64|, 1): <= 2e-5
    for q, k std <= 20 and log V std <= 50 (Heinsen's reference formulation in fp32:
    <= 2.7e-5), except q, k std 20 with log V std 50 at chunk 16 (2.3e-2). With log V std
    >= 20 it is 1e-4 to 0.3 at q, k std 25 and O(1) at 30: a row whose largest term pairs
    a weight e^-90 with a value e^90 above the others' falls out of fp32's range.
    Gradients, max |g - g64| / max |g64|: <= 2e-5 up to q, k std 15; 3e-2 to 0.15 at q, k
    std 20 with log V std >= 20.
    Finite and causal (1e-6) at every magnitude tried (q, k x100); exact in float64.
    """
    out_dtype, T, hv = log_v.dtype, q.shape[2], log_v.shape[-1]
    dt = _compute_dtype(q, k, log_v)
    cut = CUT[dt]
    cut_row = cut - HEADROOM  # for terms scaled by exp(HEADROOM - L_i): CUT below L_i, as the backward needs
    with torch.autocast(q.device.type, enabled=False):  # exponentials and log-sums: fp32 or fp64
        c = min(chunk, T)
        qc, kc, lvc = _log_chunks(q.to(dt), k.to(dt), log_v.to(dt), c)  # (B, H, N, c, h_k) x2, (B, H, N, c, h_v+1)
        mk, row = _key_references(qc, kc, state.m_k.to(dt))  # (B, H, N, c, h_k), (B, H, N, c, 1) L_i - HEADROOM
        base_k, end_k = mk[:, :, :, :1], mk[:, :, :, -1:]  # (B, H, N, 1, h_k) each
        scores = _intra_scores(qc, kc, mk, row, cut_row)  # (B, H, N, c, c) x exp(HEADROOM - L_i)
        scores = _cut(scores, cut_row).masked_fill(_future(c, q.device), 0.0)  # (B, H, N, c, c) causal
        log_s0 = torch.cat([state.log_s, state.log_z[..., None]], dim=-1).to(dt)  # (B, H, h_k, h_v+1)
        log_incl, log_before = _chunk_states(kc, lvc, end_k, log_s0, cut)  # (B, H, N, h_k, h_v+1) each
        q_base = _cut_exp(qc + base_k - row, cut_row)  # (B, H, N, c, h_k) <= e^HEADROOM
        carried_log = log_before - base_k.transpose(-1, -2)  # (B, H, N, h_k, h_v+1) per key reference
        log_num = _log_numerator(scores, q_base, lvc, carried_log, log_before, cut_row)  # (B, H, N, c, h_v+1)
        o = log_num[..., :hv] - log_num[..., hv:]  # (B, H, N, c, h_v) log numerator - log normaliser
        final = log_incl[:, :, -1]  # (B, H, h_k, h_v+1)
        new = LogState(final[..., :hv].contiguous(), final[..., hv].contiguous(), end_k[:, :, -1, 0].contiguous())
    return _unchunk(o, T).to(out_dtype), new


def _log_chunks(q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor, c: int) -> tuple[torch.Tensor, ...]:
    """q, k~ = k - kappa and log V~ = [log V, 0] + kappa in chunks of c (kappa_j = max_d k_jd per key
    token, moved into its values; the extra value column is the normaliser z's)."""
    ninf = float("-inf")
    with torch.no_grad():
        kappa = k.amax(dim=-1, keepdim=True)  # (B, H, T, 1) per key token
    qc = _chunks(q, c, 0.0)  # (B, H, N, c, h_k)
    kc = _chunks(k - kappa, c, ninf)  # (B, H, N, c, h_k) k~ <= 0; padded keys weigh 0
    lvc = _chunks(F.pad(log_v, (0, 1)) + kappa, c, ninf)  # (B, H, N, c, h_v+1) log V~, kappa for z
    return qc, kc, lvc


@torch.no_grad()
def _key_references(qc: torch.Tensor, kc: torch.Tensor, m_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Key stabilisers: m = running max of k~ per channel (from the state's m_k), and the row
    shift L_i - HEADROOM with L_i = max_d(q_id + m_id)."""
    B, H, N, c, hk = kc.shape
    run = torch.cummax(kc.reshape(B, H, N * c, hk), dim=2).values  # (B, H, N*c, h_k)
    mk = torch.maximum(run, m_k[:, :, None]).view(B, H, N, c, hk)  # (B, H, N, c, h_k)
    row = (qc + mk).amax(dim=-1, keepdim=True) - HEADROOM  # (B, H, N, c, 1) L_i - HEADROOM
    return mk, row


def _chunk_states(
    kc: torch.Tensor, lvc: torch.Tensor, end_k: torch.Tensor, log_s0: torch.Tensor, cut: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The state across chunks, log S_n = log(S_0 + sum_{j in chunks <= n} exp(k~_j) V~_j^T): each
    chunk's summary against its own maxima, then a logcumsumexp over the T / c summaries.
    Returns (the state after chunk n, the state before it)."""
    with torch.no_grad():
        end_v = lvc.amax(dim=3, keepdim=True)  # (B, H, N, 1, h_v+1) chunk max, finite
    sums = torch.exp(kc - end_k).transpose(-1, -2) @ torch.exp(lvc - end_v)  # (B, H, N, h_k, h_v+1) <= c
    log_sums = _cut_log(sums, cut) + end_k.transpose(-1, -2) + end_v  # (B, H, N, h_k, h_v+1) absolute
    log_incl = torch.logaddexp(torch.logcumsumexp(log_sums, dim=2), log_s0[:, :, None])  # (B, H, N, h_k, h_v+1)
    log_before = _exclusive(log_incl, log_s0[:, :, None])  # (B, H, N, h_k, h_v+1) state before chunk n
    return log_incl, log_before


def _log_numerator(
    scores: torch.Tensor,
    q_base: torch.Tensor,
    lvc: torch.Tensor,
    carried_log: torch.Tensor,
    log_before: torch.Tensor,
    cut_row: float,
) -> torch.Tensor:
    """log sum_{j<=i} exp(LSE_d(q_id + k_jd)) V_j per value column (eq. 12's numerator; the last
    column is the normaliser's): pairs inside the chunk plus the carried state. Value stabilisers:
    per column the reference is the max of everything before the chunk and of its first position,
    LEVEL higher for rows whose running max outgrew it."""
    with torch.no_grad():  # value stabilisers
        base_v = torch.maximum(log_before.amax(dim=3), lvc[:, :, :, 0])[:, :, :, None]  # (B, H, N, 1, h_v+1)
        run_v = torch.maximum(torch.cummax(lvc, dim=3).values, base_v)  # (B, H, N, c, h_v+1)
        level_v = torch.div(run_v - base_v, LEVEL, rounding_mode="floor")  # (B, H, N, c, h_v+1)
    num = torch.zeros(())  # replaced at level 0: every row's level is >= 0
    for lvl in range(int(level_v.max()) + 1):  # usually one; each row keeps its own level's result
        ref = base_v + lvl * LEVEL  # (B, H, N, 1, h_v+1)
        v_f = torch.exp((lvc - ref).clamp_max(LEVEL))  # (B, H, N, c, h_v+1) cap hits only j > i
        s_f = torch.exp(carried_log - ref)  # (B, H, N, h_k, h_v+1) <= T
        part = scores @ v_f + q_base @ s_f  # (B, H, N, c, h_v+1) x exp(HEADROOM - L_i - ref)
        num = part if lvl == 0 else torch.where(level_v == lvl, part, num)
    return _cut_log(num, cut_row, HEADROOM) + (base_v + level_v * LEVEL)  # (B, H, N, c, h_v+1) L_i cancels in o
