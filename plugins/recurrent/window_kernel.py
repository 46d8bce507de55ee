"""Sliding-window causal softmax attention, blocked: each query sees the w most recent
positions, itself included (keys j in [i - w + 1, i], fla's and Longformer's convention):

    o_i = softmax_j(q_i . k_j / sqrt(h) + M_ij) v_j,   M_ij = 0 for i - w < j <= i, else -inf

Queries go in blocks of c; a block reads only the ceil((w - 1) / c) blocks before it and
its own (copied side by side, not overlapping views), so time and memory are O(T (c + w)),
never O(T^2). Decoding carries the last w - 1 keys and
values (O(w) state); the same function serves training (empty cache) and ``step``. From an
empty cache with t <= w the window masks nothing that causality does not: that case is
``F.scaled_dot_product_attention(is_causal=True)`` (the CPU suites' T <= 64 at w = 64).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

FLA_WINDOW_OP = "fla.ops.attn.parallel_attn(window_size=w)"
SHORT_WINDOW_OP = "torch.nn.functional.scaled_dot_product_attention(is_causal=True)"  # T <= w, empty cache
SDPA_BLOCKED_OP = "torch.nn.functional.scaled_dot_product_attention(attn_mask=band)"  # blocks of c queries
SDPA_UP_TO_WINDOW = True  # False: the blocked kernel even then (an A/B switch; timed at bef43bc)


@dataclass(frozen=True)
class WindowCache:
    """The last min(T, w - 1) keys and values, oldest first (what the next query can see)."""

    k: torch.Tensor  # (B, H, P, h), P <= w - 1
    v: torch.Tensor  # (B, H, P, h)


def window_init_cache(
    batch: int, n_head: int, head_dim: int, device=None, dtype: torch.dtype | None = None
) -> WindowCache:
    """An empty cache (P = 0): it grows to w - 1 positions, then slides."""
    empty = torch.zeros(batch, n_head, 0, head_dim, device=device, dtype=dtype or torch.float32)  # (B, H, 0, h)
    return WindowCache(empty, empty.clone())


def window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: WindowCache, window: int, block: int
) -> tuple[torch.Tensor, WindowCache]:
    """q, k, v (B, H, t, h) the next t positions after ``cache``. Returns o (B, H, t, h) in
    v's dtype and the new cache (new tensors)."""
    out_dtype, (t, h), P, w = v.dtype, q.shape[2:], cache.k.shape[2], window  # q (B, H, t, h)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    keys = torch.cat([cache.k.to(v.dtype), k], dim=2)  # (B, H, P+t, h)
    values = torch.cat([cache.v.to(v.dtype), v], dim=2)  # (B, H, P+t, h)
    keep = max(P + t - (w - 1), 0)  # the last w - 1 positions stay, at the cache's own dtype
    new = WindowCache(keys[:, :, keep:].to(cache.k.dtype, copy=True), values[:, :, keep:].to(cache.v.dtype, copy=True))
    # from an empty cache no query reaches past the window: plain causal attention
    if SDPA_UP_TO_WINDOW and P == 0 and t <= w:
        with torch.autocast(q.device.type, enabled=False):
            o = F.scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), is_causal=True)  # (B, H, t, h)
        return o.to(out_dtype), new
    with torch.autocast(q.device.type, enabled=False):  # scores and softmax in fp32 (float64 when given)
        c = min(block, t)
        N = -(-t // c)
        prev = -(-(w - 1) // c)  # whole blocks before a block that its queries can reach
        front = prev * c - P  # zero keys before position 0 (masked): the cache and the front fill `prev` blocks
        back = N * c - t  # tail padding
        B, H = q.shape[:2]
        kp, vp = (_blocks_first(F.pad(x.to(dt), (0, 0, front, back)), N + prev, c) for x in (keys, values))
        # block n reads blocks n .. n + prev of the padded keys: a copy per block, not overlapping views
        kb = torch.cat([kp[j : j + N] for j in range(prev + 1)], dim=3).flatten(1, 2)  # (N, BH, S, h), S = (prev+1) c
        vb = torch.cat([vp[j : j + N] for j in range(prev + 1)], dim=3).flatten(1, 2)  # (N, BH, S, h)
        qb = _blocks_first(F.pad(q.to(dt), (0, 0, 0, back)), N, c).flatten(1, 2)  # (N, BH, c, h)
        i = torch.arange(c, device=q.device)[:, None]  # (c, 1) query offset in its block
        r = torch.arange((prev + 1) * c, device=q.device)[None, :]  # (1, S) key offset in the block's span
        start = torch.arange(N, device=q.device)[:, None, None] * c  # (N, 1, 1) block start
        # Query i of block n sits at span offset prev c + i; key r is seen when 0 <= prev c + i - r < w, and
        # it is a real key (not front padding) when n c + r >= front.
        gap = prev * c + i - r  # (c, S) positions from key to query
        seen = (gap >= 0) & (gap < w) & (start + r >= front)  # (N, c, S)
        mask = torch.zeros(seen.shape, dtype=dt, device=q.device).masked_fill(~seen, float("-inf"))  # (N, c, S) M
        # softmax(q k^T / sqrt(h) + M) v per block, the blocks as SDPA's batch and the heads as its heads, so
        # M (N, 1, c, S) broadcasts without a copy per head; every real row sees itself. The fused kernel
        # (SDPA_BLOCKED_OP) ran the window's forward + backward in 0.8-0.9x the time of the scores, the
        # masked softmax and the product written out (T 8192, w = c = 64, h 32, one CPU thread).
        o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask[:, None], scale=h**-0.5)  # (N, BH, c, h)
        o = o.unflatten(1, (B, H)).permute(1, 2, 0, 3, 4).flatten(2, 3)[:, :, :t]  # (B, H, t, h)
    return o.to(out_dtype), new


def _blocks_first(x: torch.Tensor, n: int, c: int) -> torch.Tensor:
    """(B, H, n c, h) -> (N = n, B, H, c, h): blocks of c positions, the block index first."""
    return x.unflatten(2, (n, c)).permute(2, 0, 1, 3, 4)


def window_weights(q: torch.Tensor, k: torch.Tensor, window: int) -> torch.Tensor:
    """The full (B, H, T, T) probabilities of the sliding window (for attention maps), fp32."""
    T = q.shape[2]
    scores = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, T, T)
    pos = torch.arange(T, device=q.device)
    gap = pos[:, None] - pos[None, :]  # (T, T) i - j
    return scores.masked_fill((gap < 0) | (gap >= window), float("-inf")).softmax(-1)  # (B, H, T, T)


def fla_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """fla's Triton kernel for the same equation, from an empty cache: (B, H, T, h) in and out."""
    from fla.ops.attn import parallel_attn

    qq, kk, vv = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # (B, T, H, h) fla's layout
    o = parallel_attn(qq, kk, vv, scale=q.shape[-1] ** -0.5, window_size=window)  # (B, T, H, h)
    return o.transpose(1, 2).to(v.dtype)  # (B, H, T, h)
