"""Chunked gated linear attention: the kernel of retention (a fixed decay per head) and GLA
(a data-dependent decay per key channel). Per head, with S_0 the carried state:

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,    o_t = scale * S_t^T q_t      (g_t <= 0)

Chunks of c positions: G = the cumulative sum of g inside a chunk; intra-chunk weights
A_ij = scale * sum_d q_id k_jd exp(G_id - G_jd) for j <= i. A decay per head weighs the
(c, c) scores by its decay matrix (``decays.decay_matrix``); a decay per key channel takes one
matmul of q e^G and k e^-G (G, e^G and e^-G from float64, each rounded once), and pairwise
(c, c, d_k) exponents, all <= 0, for the rows whose decay since the chunk's start spans more
than e^-8 (``GLA_SPAN``): no factor can overflow, whatever the decay, and the log decays'
gradients keep their digits at strong gates. Across
chunks the state, S_{n+1} = diag(exp(G_c)) S_n + (K * exp(G_c - G))^T V, is carried by a
loop over chunks.
Computes in fp32 with autocast off (float64 when given float64); the caller's state is
never modified.
"""

from __future__ import annotations

import torch

from attnbench.plugins.recurrent.common import causal, chunks, compute_dtype, state_dtype
from attnbench.plugins.recurrent.decays import after_sums, decay_factors, decay_matrix, exact_past_span, segment_sums

# Rows whose decay since the chunk's start spans more than e^-GLA_SPAN (their widest channel) take
# the pairwise form: the factorised one's gradient of the log decays is a row sum less a column sum
# that cancel, and at strong gates (T 100, chunk 7, log decays -4..-6 per step) it put gate_up's fp32
# gradients 2-3x (16x in issue 65's case) further from float64 than fla's fp32 recurrence; past
# e^-8, 0.9x (tests/test_gate_gla_strong.py). At default gates (temperature 16) no row gets there.
GLA_SPAN = 8.0


def gla_init_state(
    batch: int, n_head: int, d_k: int, d_v: int, device=None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    return torch.zeros(batch, n_head, d_k, d_v, device=device, dtype=state_dtype(dtype))  # (B, H, d_k, d_v)


def pair_decay(g: torch.Tensor) -> torch.Tensor:
    """exp(sum_{j<l<=i} g_l) for j <= i, else 0: per-step log decays (..., c, e) -> (..., e, c, c).
    Each exponent is a segment sum (<= 0) of its own span, never a difference of running sums."""
    return torch.exp(segment_sums(g.transpose(-1, -2)))  # (..., e, c, c)


def gated_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, state: torch.Tensor, chunk: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (B, H, T, d_k), v (B, H, T, d_v), g (B, H, T, d_k) or (B, H, T, 1) log decays <= 0,
    state (B, H, d_k, d_v). Returns o (B, H, T, d_v) in v's dtype and the state after T."""
    out_dtype, T = v.dtype, v.shape[2]
    dt = compute_dtype(q, k, v, g)
    with torch.autocast(v.device.type, enabled=False):  # fp32 (fp64): decays and running sums
        c = min(chunk, T)
        qc, kc, vc = (chunks(t.to(dt), c) for t in (q, k, v))  # (B, H, N, c, d)
        gc = chunks(g.to(dt), c)  # (B, H, N, c, e) log decays per step
        G, gamma, inverse = decay_factors(gc, 3)  # (B, H, N, c, e) log decay since the chunk's start, e^G, e^-G
        if gc.shape[-1] == 1:  # one decay per head: weight the scores
            scores = (qc @ kc.transpose(-1, -2)) * decay_matrix(gc[..., 0])  # (B, H, N, c, c)
        else:  # one per key channel: inside the sum over d
            scores = _channel_scores(qc, kc, gc, (G, gamma, inverse))  # (B, H, N, c, c)
        intra = scale * (scores @ vc)  # (B, H, N, c, d_v)
        k_end = kc * torch.exp(after_sums(gc))  # (B, H, N, c, d_k) decayed to the chunk end
        chunk_kv = k_end.transpose(-1, -2) @ vc  # (B, H, N, d_k, d_v)
        through = gamma[:, :, :, -1].unsqueeze(-1)  # (B, H, N, e, 1) decay across a chunk
        s, before = state.to(dt), []
        for a_n, kv_n in zip(through.unbind(2), chunk_kv.unbind(2), strict=True):  # S_{n+1} = a S_n + chunk_kv_n
            before.append(s)
            s = a_n * s + kv_n  # (B, H, d_k, d_v); chunks unbound once, never indexed in the loop
        carried = torch.stack(before, dim=2)  # (B, H, N, d_k, d_v) the state entering each chunk
        inter = scale * ((qc * gamma) @ carried)  # (B, H, N, c, d_v) exp(G) <= 1
        o = (intra + inter).flatten(2, 3)[:, :, :T]  # (B, H, T, d_v)
    return o.to(out_dtype), s.to(state_dtype(state.dtype))


def _channel_scores(
    qc: torch.Tensor, kc: torch.Tensor, gc: torch.Tensor, decays: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """A_ij = sum_d q_id k_jd exp(G_id - G_jd) for j <= i, else 0: (B, H, N, c, c). One small
    matmul per chunk, and the pairwise form for the rows whose own decay leaves GLA_SPAN: a
    row's path depends on its own span only, never on a later key's gate (causal to the bit).
    decays: G, e^G and e^-G (clamped at e^FACTOR_SPAN), (B, H, N, c, d_k), from float64."""
    c = qc.shape[3]
    G, gamma, inverse = decays
    q_f = qc * gamma  # (B, H, N, c, d_k) q_id e^{G_id}, e^G <= 1
    k_f = kc * inverse  # (B, H, N, c, d_k) k_jd e^{-G_jd}; clamped beyond the rows kept
    scores = (q_f @ k_f.transpose(-1, -2)) * causal(c, qc)  # (B, H, N, c, c) finite: every factor within e^30

    def exact(at: tuple[torch.Tensor, ...]) -> torch.Tensor:  # (M, c, c) sum_d q_id decay_dij k_jd, exponents <= 0
        q_d = qc[at].transpose(-1, -2).unsqueeze(-1)  # (M, d_k, c, 1) q_id
        k_d = kc[at].transpose(-1, -2).unsqueeze(-2)  # (M, d_k, 1, c) k_jd
        return (q_d * pair_decay(gc[at]) * k_d).sum(dim=-3)

    return exact_past_span(scores, G.amin(dim=-1), exact, GLA_SPAN)  # (B, H, N, c, c) a row's span: its widest channel
