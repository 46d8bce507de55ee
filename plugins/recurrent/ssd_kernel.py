"""Chunked scan with a scalar decay per head and position: Mamba2's SSD (Dao & Gu 2024,
"Transformers are SSMs", sec. 6), the state-space dual of masked attention:

    S_t = a_t S_{t-1} + b_t x_t^T,   y_t = S_t^T c_t       (a_t = exp(log_a_t) in (0, 1])

i.e. y_i = sum_{j<=i} exp(sum_{j<l<=i} log_a_l) (c_i . b_j) x_j + exp(sum_{l<=i} log_a_l) S_0^T c_i.
Inside a chunk of c positions the masked c x c form; across chunks the carried states, all
of them at once from a (N+1) x (N+1) decay matrix over the chunks. Every decay is a direct
sum of log_a over its own span (a matmul with a 0/1 span matrix, never a difference of two prefix
sums, which cancels in fp32 on long sequences). fp32 with autocast off, float64 when given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ssd_init_state(
    batch: int, n_head: int, d_state: int, head_dim: int, device=None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """S_0 = 0 (B, H, N_s, P): fp32 unless float64 is asked (a running sum)."""
    dt = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.zeros(batch, n_head, d_state, head_dim, device=device, dtype=dt)


def segment_sums(log_a: torch.Tensor) -> torch.Tensor:
    """(..., L) -> (..., L, L): entry [i, j] = sum_{j<l<=i} log_a_l for j <= i, -inf above
    the diagonal (exp gives the causal decay matrix; no inf * 0). One matmul with the 0/1
    span matrix: each entry sums exactly its own terms, and its backward is one matmul too."""
    L = log_a.shape[-1]
    pos = torch.arange(L, device=log_a.device)  # (L,)
    row, col, step = pos[:, None, None], pos[None, :, None], pos[None, None, :]  # [i, j, l] index grids
    span = ((col < step) & (step <= row)).to(log_a.dtype).reshape(L * L, L)  # (L*L, L) 1 where j < l <= i
    above = torch.full((L, L), float("-inf"), dtype=log_a.dtype, device=log_a.device).triu(1)  # (L, L) j > i
    finite = log_a.clamp_min(torch.finfo(log_a.dtype).min / L)  # (..., L) a -inf step would give 0 * inf
    seg = finite.reshape(-1, L) @ span.T  # (rows, L*L) one 2-D matmul, not a batch of 1-row ones
    return seg.reshape(*log_a.shape[:-1], L, L) + above  # (..., L, L)


def ssd_scan(
    c: torch.Tensor, b: torch.Tensor, x: torch.Tensor, log_a: torch.Tensor, state: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """c, b (B, H, T, N_s) (Mamba2's C and dt * B), x (B, H, T, P), log_a (B, H, T) <= 0,
    state S_0 (B, H, N_s, P). Returns y (B, H, T, P) in x's dtype and the state after T
    (a new tensor; the given one is never modified)."""
    out_dtype, T = x.dtype, x.shape[2]
    dt = torch.float64 if torch.float64 in (c.dtype, b.dtype, x.dtype, log_a.dtype) else torch.float32
    with torch.autocast(x.device.type, enabled=False):  # the state sums the whole sequence
        n = min(chunk, T)
        N = -(-T // n)
        pad = N * n - T  # padded tail: b = x = 0 and log_a = 0 add nothing
        cc, bc, xc = (F.pad(t.to(dt), (0, 0, 0, pad)).unflatten(2, (N, n)) for t in (c, b, x))  # (B, H, N, n, .)
        ac = F.pad(log_a.to(dt), (0, pad)).unflatten(2, (N, n))  # (B, H, N, n)
        decay = torch.exp(segment_sums(ac))  # (B, H, N, n, n) exp(sum_{j<l<=i} log_a_l), 0 for j > i
        y = ((cc @ bc.transpose(-1, -2)) * decay) @ xc  # (B, H, N, n, P) inside each chunk
        to_end = decay[..., -1, :]  # (B, H, N, n) exp(sum_{j<l<=end} log_a_l): key j to the chunk's end
        from_start = torch.exp(ac.cumsum(-1))  # (B, H, N, n) exp(sum_{start<=l<=i} log_a_l)
        summary = (bc * to_end[..., None]).transpose(-1, -2) @ xc  # (B, H, N, N_s, P) chunk's own b x^T
        src = torch.cat([state.to(dt)[:, :, None], summary], dim=2)  # (B, H, N+1, N_s, P) S_0, U_0..U_{N-1}
        whole = F.pad(ac.sum(-1), (1, 0))  # (B, H, N+1) log decay of each chunk, 0 for S_0's slot
        carry = torch.exp(segment_sums(whole))  # (B, H, N+1, N+1) [m, s]: source s to the start of chunk m
        states = torch.einsum("bhms,bhsnp->bhmnp", carry, src)  # (B, H, N+1, N_s, P) S before chunk m; m = N: final
        y = y + from_start[..., None] * (cc @ states[:, :, :N])  # (B, H, N, n, P) + carried state
        y = y.flatten(2, 3)[:, :, :T]  # (B, H, T, P)
        final = states[:, :, N].contiguous()  # (B, H, N_s, P)
    return y.to(out_dtype), final


def ssd_flops_per_token(n_head: int, d_state: int, head_dim: int, chunk: int, T: int) -> float:
    """Per head: c x c scores 2 c N_s, scores @ x 2 c P, chunk summary and carried-state read
    2 * 2 N_s P (decays, exponentials and the chunk-level einsum, O(T / c), not counted)."""
    c = min(chunk, max(T, 1))
    return n_head * (2.0 * c * d_state + 2.0 * c * head_dim + 4.0 * d_state * head_dim)
