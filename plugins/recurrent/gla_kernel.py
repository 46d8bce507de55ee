"""Chunked gated linear attention: the kernel of retention (a fixed decay per head) and GLA
(a data-dependent decay per key channel). Per head, with S_0 the carried state:

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,    o_t = scale * S_t^T q_t      (g_t <= 0)

Chunks of c positions: G = the cumulative sum of g inside a chunk; intra-chunk weights
A_ij = scale * sum_d q_id k_jd exp(G_id - G_jd) for j <= i, built from pairwise exponents
that are <= 0 (no exp(+G) factor can overflow, whatever the decay); across chunks the state,
S_{n+1} = diag(exp(G_c)) S_n + (K * exp(G_c - G))^T V, carried by a loop over chunks.
A decay per head (g of last size 1) needs (c, c) exponents, per channel (c, c, d_k).
Computes in fp32 with autocast off (float64 when given float64); the caller's state is
never modified.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnbench.plugins.recurrent.common import compute_dtype, state_dtype
from attnbench.plugins.recurrent.ssd_kernel import segment_sums


def gla_init_state(
    batch: int, n_head: int, d_k: int, d_v: int, device=None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    return torch.zeros(batch, n_head, d_k, d_v, device=device, dtype=state_dtype(dtype))  # (B, H, d_k, d_v)


def _chunks(x: torch.Tensor, c: int) -> torch.Tensor:
    """(B, H, T, e) -> (B, H, N, c, e), the tail padded with zeros (k = 0, g = 0: no effect)."""
    B, H, T, e = x.shape
    N = -(-T // c)
    return F.pad(x, (0, 0, 0, N * c - T)).reshape(B, H, N, c, e)


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
        qc, kc, vc = (_chunks(t.to(dt), c) for t in (q, k, v))  # (B, H, N, c, d)
        gc = _chunks(g.to(dt), c)  # (B, H, N, c, e) log decays per step
        decay = pair_decay(gc)  # (B, H, N, e, c, c) exp(sum_{j<l<=i} g_l), 0 for j > i
        if gc.shape[-1] == 1:  # one decay per head: weight the scores
            scores = (qc @ kc.transpose(-1, -2)) * decay[:, :, :, 0]  # (B, H, N, c, c)
        else:  # one per key channel: inside the sum over d, as two broadcast products and one sum
            q_d = qc.transpose(-1, -2).unsqueeze(-1)  # (B, H, N, d_k, c, 1) q_id
            k_d = kc.transpose(-1, -2).unsqueeze(-2)  # (B, H, N, d_k, 1, c) k_jd
            scores = (q_d * decay * k_d).sum(dim=-3)  # (B, H, N, c, c) sum_d q_id decay_dij k_jd
        intra = scale * (scores @ vc)  # (B, H, N, c, d_v)
        k_end = kc * decay[..., -1, :].transpose(-1, -2)  # (B, H, N, c, d_k) decayed to the chunk end
        chunk_kv = k_end.transpose(-1, -2) @ vc  # (B, H, N, d_k, d_v)
        through = torch.exp(gc.sum(dim=3)).unsqueeze(-1)  # (B, H, N, e, 1) decay across a chunk
        s, before = state.to(dt), []
        for a_n, kv_n in zip(through.unbind(2), chunk_kv.unbind(2), strict=True):  # S_{n+1} = a S_n + chunk_kv_n
            before.append(s)
            s = a_n * s + kv_n  # (B, H, d_k, d_v); chunks unbound once, never indexed in the loop
        carried = torch.stack(before, dim=2)  # (B, H, N, d_k, d_v) the state entering each chunk
        inter = scale * ((qc * torch.exp(gc.cumsum(dim=3))) @ carried)  # (B, H, N, c, d_v) exp(G) <= 1
        o = (intra + inter).flatten(2, 3)[:, :, :T]  # (B, H, T, d_v)
    return o.to(out_dtype), s.to(state_dtype(state.dtype))


def gla_flops_per_token(n_head: int, d_k: int, d_v: int, chunk: int, T: int, per_channel: bool) -> float:
    """Kernel FLOPs per token: c x c scores 2 c d_k (+ c d_k decays per channel), scores @ V
    2 c d_v, chunk summary and carried-state read 2 * 2 d_k d_v."""
    c = min(chunk, max(T, 1))
    return n_head * (2.0 * c * d_k + (c * d_k if per_channel else c) + 2.0 * c * d_v + 4.0 * d_k * d_v)
