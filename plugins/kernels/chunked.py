"""Chunkwise causal scans shared by the ``linear`` and ``heinsen`` attention plugins.

Both variants are linear attention, o_i = phi(q_i)^T S_i / (phi(q_i)^T z_i [+ eps]) with
S_i = sum_{j<=i} phi(k_j) v_j^T and z_i = sum_{j<=i} phi(k_j). The sequence is cut into
chunks of c positions: inside a chunk the masked quadratic form (c x c scores), across
chunks a carried state, so training memory is O(T (h + c) + (T / c) h_k h_v) per head
instead of the O(T h_k h_v) of a cumulative sum of outer products.

The same functions serve training (no initial state) and decoding (``step`` passes the
previous state and gets a new one back; the tensors it was given are never modified).
Everything runs in fp32 with autocast disabled: the state is a sum over the whole
sequence, and the log-space variant exponentiates, which half precision cannot hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# exp(k - ref) is capped at exp(LEVEL) and the stabiliser levels are LEVEL apart: with the
# query factor >= exp(-LEVEL - 17) for any product that can move an fp32 sum, neither factor
# leaves the normal fp32 range (e^-87 .. e^88).
LEVEL = 40.0


@dataclass(frozen=True)
class LinearState:
    """Recurrent state of causal linear attention, one sequence per batch row (fp32)."""

    s: torch.Tensor  # (B, H, h_k, h_v) sum_j phi(k_j) v_j^T
    z: torch.Tensor  # (B, H, h_k) sum_j phi(k_j)


@dataclass(frozen=True)
class LogState:
    """Recurrent state of log-space (phi = exp) attention, stored max-shifted (fp32).

    The true sums are S = s * exp(m_k[:, None] + m_v[None, :]) and Z = z * exp(m_k): the
    running maxima keep every stored entry <= the number of tokens seen.
    """

    s: torch.Tensor  # (B, H, h_k, h_v) sum_j exp(k_j - m_k) exp(log v_j - m_v)^T
    z: torch.Tensor  # (B, H, h_k) sum_j exp(k_j - m_k)
    m_k: torch.Tensor  # (B, H, h_k) running max of k per channel; -inf before any token
    m_v: torch.Tensor  # (B, H, h_v) running max of log V per channel; -inf before any token


def linear_init_state(batch: int, n_head: int, h_k: int, h_v: int, device=None) -> LinearState:
    f32 = dict(device=device, dtype=torch.float32)
    return LinearState(torch.zeros(batch, n_head, h_k, h_v, **f32),  # (B, H, h_k, h_v)
                       torch.zeros(batch, n_head, h_k, **f32))  # (B, H, h_k)


def log_init_state(batch: int, n_head: int, h_k: int, h_v: int, device=None) -> LogState:
    ninf, f32 = float("-inf"), dict(device=device, dtype=torch.float32)
    return LogState(torch.zeros(batch, n_head, h_k, h_v, **f32),  # (B, H, h_k, h_v)
                    torch.zeros(batch, n_head, h_k, **f32),  # (B, H, h_k)
                    torch.full((batch, n_head, h_k), ninf, **f32),  # (B, H, h_k)
                    torch.full((batch, n_head, h_v), ninf, **f32))  # (B, H, h_v)


def chunked_flops_per_token(d_model: int, n_head: int, head_dim: int, chunk: int, T: int) -> float:
    """Analytic forward FLOPs per token of a chunked linear-attention layer at context T:
    QKV and output projections 8 d^2; per head c x c scores 2 c h, scores @ [v, 1]
    2 c (h+1), chunk summary phi(k)^T [v, 1] and carried-state read 2 * 2 h (h+1)
    (element-wise feature maps, exponentials and logs not counted)."""
    c, h = min(chunk, max(T, 1)), head_dim
    return 8.0 * d_model * d_model + n_head * (2.0 * c * h + 2.0 * c * (h + 1) + 4.0 * h * (h + 1))


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


def linear_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor,
                     state: LinearState, chunk: int, eps: float) -> tuple[torch.Tensor, LinearState]:
    """Causal linear attention, chunkwise (Katharopoulos et al. 2020, eq. 9 with the state):

        o_i = phi(q_i)^T (S_0 + sum_{j<=i} phi(k_j) v_j^T) / (phi(q_i)^T (z_0 + sum_{j<=i} phi(k_j)) + eps)

    phi_q, phi_k (B, H, T, h_k) > 0 and v (B, H, T, h_v); returns o (B, H, T, h_v) in v's
    dtype and the state after position T. eps is added after the dot product. Gradients
    come from ``_LinearChunked``'s hand-written backward, which keeps only the inputs and the
    carried states and recomputes the c x c scores.
    """
    out_dtype, T = v.dtype, v.shape[2]
    with torch.autocast(v.device.type, enabled=False):  # fp32: the state sums the whole sequence
        c = min(chunk, T)
        fq = _chunks(phi_q.float(), c, 0.0)  # (B, H, N, c, h_k)
        fk = _chunks(phi_k.float(), c, 0.0)  # (B, H, N, c, h_k) zero rows add nothing
        vc = _chunks(v.float(), c, 0.0)  # (B, H, N, c, h_v)
        s0 = torch.cat([state.s, state.z[..., None]], dim=-1).float()  # (B, H, h_k, h_v+1) [S_0, z_0]
        o, final = _LinearChunked.apply(fq, fk, vc, s0, eps)  # (B, H, N, c, h_v), (B, H, h_k, h_v+1)
        h_v = vc.shape[-1]
        new = LinearState(final[..., :h_v].contiguous(), final[..., h_v].contiguous())  # new tensors,
    return _unchunk(o, T).to(out_dtype), new  # never the caller's


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


def log_attention(q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor, state: LogState,
                  chunk: int) -> tuple[torch.Tensor, LogState]:
    """Heinsen's causal log-space attention (arXiv 2404.05843, eq. 12-13), chunkwise:

        o_i = log sum_{j<=i} exp(LSE_d(q_id + k_jd) + log V_j) - log sum_{j<=i} exp(LSE_d(q_id + k_jd))

    i.e. the log of linear attention with phi = exp and values exp(log V). q, k (B, H, T,
    h_k), log_v (B, H, T, h_v); returns o (B, H, T, h_v) in log_v's dtype and the state.

    Stabilisers (all detached; each cancels exactly, so gradients are unchanged):
    * m_t = running max of k per channel (causal); each chunk factors
      exp(q_id + k_jd) = exp(q_id + r_d - L_i) exp(k_jd - r_d) exp(L_i), with the per-row
      shift L_i = max_d(q_id + m_id) (cancels in the ratio) and a reference r_d: the max at
      the chunk start, raised in steps of LEVEL for channels whose max grew inside the chunk,
      so the query factor is <= 1 and the key factor <= exp(LEVEL) for every pair j <= i.
    * log V is shifted by its running max per channel at the chunk end, added back to o.
    * across chunks the state is summed in log space (logcumsumexp over T / c chunk
      summaries), then re-read relative to each chunk's references: every entry <= T.
    """
    out_dtype, (B, H, T, hk), hv = log_v.dtype, q.shape, log_v.shape[-1]
    ninf, tiny = float("-inf"), torch.finfo(torch.float32).tiny
    with torch.autocast(q.device.type, enabled=False):  # fp32: exponentials and log-sums
        c = min(chunk, T)
        qc = _chunks(q.float(), c, 0.0)  # (B, H, N, c, h_k)
        kc = _chunks(k.float(), c, ninf)  # (B, H, N, c, h_k) padded keys weigh exp(-inf) = 0
        lvc = _chunks(log_v.float(), c, ninf)  # (B, H, N, c, h_v)
        N = qc.shape[2]
        m0_k, m0_v = state.m_k.float(), state.m_v.float()  # (B, H, h_k), (B, H, h_v)
        with torch.no_grad():  # stabilisers: constants that cancel, no gradient through them
            run = torch.cummax(kc.reshape(B, H, N * c, hk), dim=2).values  # (B, H, N*c, h_k)
            mk = torch.maximum(run, m0_k[:, :, None]).view(B, H, N, c, hk)  # (B, H, N, c, h_k) running max of k
            base = mk[:, :, :, :1]  # (B, H, N, 1, h_k) at each chunk's first position
            end = mk[:, :, :, -1]  # (B, H, N, h_k) at each chunk's last position
            row = (qc + mk).amax(dim=-1, keepdim=True)  # (B, H, N, c, 1) L_i: the largest q_id + k_jd, j <= i
            mv = torch.maximum(torch.cummax(lvc.amax(dim=3), dim=2).values, m0_v[:, :, None])  # (B, H, N, h_v)
            # The max only grows inside a chunk, so its largest growth is end - base.
            n_levels = int(torch.div(end - base.squeeze(3), LEVEL, rounding_mode="floor").max()) + 1
        q_base = torch.exp(qc + base - row)  # (B, H, N, c, h_k) <= 1 since base <= m_i
        mvx = F.pad(mv, (0, 1))  # (B, H, N, h_v+1) value references; 0 for the ones column
        vx = _with_ones(torch.exp(lvc - mv[:, :, :, None]))  # (B, H, N, c, h_v+1) <= 1
        if n_levels == 1:  # usual case: every key < base + LEVEL, one reference per chunk
            k_base = torch.exp(kc - base)  # (B, H, N, c, h_k) <= exp(LEVEL)
            scores = q_base @ k_base.transpose(-1, -2)  # (B, H, N, c, c)
            sums = k_base.transpose(-1, -2) @ vx  # (B, H, N, h_k, h_v+1) chunk summary, x exp(-base)
            ref_sums = base.squeeze(3)  # (B, H, N, h_k)
        else:  # a key channel jumped by > LEVEL inside a chunk (e.g. logits x100)
            level = torch.div(mk - base, LEVEL, rounding_mode="floor")  # (B, H, N, c, h_k)
            scores = torch.zeros(B, H, N, c, c, device=q.device)  # (B, H, N, c, c)
            for lvl in range(n_levels):
                ref = base + lvl * LEVEL  # (B, H, N, 1, h_k) reference of channels at this level
                q_f = torch.exp(torch.where(level == lvl, qc + ref - row, ninf))  # (B, H, N, c, h_k) <= 1
                k_f = torch.exp((kc - ref).clamp_max(LEVEL))  # (B, H, N, c, h_k) cap hits only pairs j > i
                scores = scores + q_f @ k_f.transpose(-1, -2)  # (B, H, N, c, c)
            sums = torch.exp(kc - end[:, :, :, None]).transpose(-1, -2) @ vx  # (B, H, N, h_k, h_v+1) <= c
            ref_sums = end  # (B, H, N, h_k)
        scores = scores.masked_fill_(_future(c, q.device), 0.0)  # (B, H, N, c, c) causal
        # Chunk summaries as absolute logs (their references added back) for the scan.
        log_sums = sums.clamp_min(tiny).log() + ref_sums[..., None] + mvx[:, :, :, None]  # (B, H, N, h_k, h_v+1)
        log_incl = torch.logcumsumexp(log_sums, dim=2)  # (B, H, N, h_k, h_v+1) log-space scan over chunks
        log_before = _exclusive(log_incl, torch.full_like(log_incl[:, :, :1], ninf))  # (B, H, N, h_k, h_v+1)
        s0 = torch.cat([state.s, state.z[..., None]], dim=-1).float()  # (B, H, h_k, h_v+1)
        mvx0 = F.pad(m0_v, (0, 1))  # (B, H, h_v+1)
        ref_k = base.squeeze(3)  # (B, H, N, h_k)
        carried = (torch.exp(log_before - ref_k[..., None] - mvx[:, :, :, None])  # (B, H, N, h_k, h_v+1)
                   + s0[:, :, None] * torch.exp(m0_k[:, :, None] - ref_k)[..., None]
                   * torch.exp(mvx0[:, :, None] - mvx)[:, :, :, None])  # initial state, re-referenced
        num = scores @ vx + q_base @ carried  # (B, H, N, c, h_v+1) both scaled by exp(-L_i)
        # log V shift added back; the normaliser holds the e^0 term of the row max, so >= ~1.
        o = num[..., :hv].clamp_min(tiny).log() + mv[:, :, :, None] - num[..., hv:].log()  # (B, H, N, c, h_v)
        m_k, mvx_T = end[:, :, -1], mvx[:, :, -1]  # (B, H, h_k), (B, H, h_v+1)
        final = (torch.exp(log_incl[:, :, -1] - m_k[..., None] - mvx_T[:, :, None])  # (B, H, h_k, h_v+1)
                 + s0 * torch.exp(m0_k - m_k)[..., None] * torch.exp(mvx0 - mvx_T)[:, :, None])
        new = LogState(final[..., :hv].contiguous(), final[..., hv].contiguous(),
                       m_k.contiguous(), mv[:, :, -1].contiguous())
    return _unchunk(o, T).to(out_dtype), new
