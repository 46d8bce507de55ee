"""Causal additive pooling (mtanghu's cumsum Fastformer, spec section 2), computed soundly.

For one head, vectors x_j in R^h, a learned vector w in R^h, rescale s and window k:

    norm(x) = (x - mean(x)) / (std_unbiased(x) + 1e-5)        x^_j = norm(x_j), w^ = norm(w)
    a_j     = s * (x^_j . w^) / h
    g_i     = sum_{j in W(i)} e^{a_j} x^_j / (sum_{j in W(i)} e^{a_j} [+ 1e-5 if eps_compat])

with W(i) = {max(0, i-k+1), ..., i}: k tokens including token i; k >= T is global pooling.

Numerics, against the reference's difference of two long prefix sums:

* Fixed max-subtraction: ||norm(x)||^2 <= h - 1, so |a| < s (Cauchy-Schwarz) and every
  weight e^{a - s} lies in (e^{-2s}, 1]. No exponent can overflow in any precision, and the
  shift depends on no data, so rounding at position i never depends on later tokens.
* Window sums never subtract prefix sums. The sequence is cut into blocks of exactly k
  tokens; the window of i is the prefix of i's own block up to i plus the suffix of the
  previous block after i - k (van Herk / Gil-Werman). Both are sums of at most k terms, so
  the error does not grow with T and the cost, O(T) per channel, does not depend on k.
* Global sums use a two-level prefix scan (within blocks, then over block totals), so a
  position's sum accumulates O(block + T / block) roundings rather than O(T).
* Everything from the normalisation on runs in (at least) fp32, autocast or not.

Memory: the pooling is one autograd Function that keeps only its input x, the denominators
Z (one scalar per head and position) and its output g, and recomputes the rest in backward;
the plain-autograd reference keeps about four more tensors of the size of x.

The constants and ``PoolSpec`` are in ``additive_spec`` (torch-free, for option checks).
"""

from __future__ import annotations

import math

import torch

from attnbench.plugins.kernels.additive_spec import NORM_EPS, PoolSpec


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32, or fp64 when the input is fp64: sums and exponentials never run in half."""
    return torch.promote_types(dtype, torch.float32)


def normalise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """norm(x) over the last axis: (x - mean) / (std_unbiased + 1e-5), and the std (..., 1)."""
    xhat = x - x.mean(-1, keepdim=True)  # (..., h) centred
    std = torch.linalg.vector_norm(xhat, dim=-1, keepdim=True) / math.sqrt(x.size(-1) - 1)  # (..., 1)
    if xhat.requires_grad:  # autograd path (the head vectors w): out of place
        return xhat / (std + NORM_EPS), std
    return xhat.div_(std + NORM_EPS), std  # eps on the std, not inside the sqrt


# ---------------------------------------------------------------------------------------
# Window sums along the sequence axis (dim 1) of v (B, T, ...).


def _blocked(v: torch.Tensor, c: int) -> torch.Tensor:
    """(B, T, ...) -> (B, n, c, ...), zero-padded at the end to n = ceil(T / c) blocks."""
    B, T = v.shape[:2]
    n = -(-T // c)
    if n * c != T:
        v = torch.cat([v, v.new_zeros(B, n * c - T, *v.shape[2:])], 1)  # zeros weigh nothing
    return v.view(B, n, c, *v.shape[2:])  # (B, n, c, ...)


def _suffix(vb: torch.Tensor) -> torch.Tensor:
    """Inclusive suffix sums within each block, summed from the block's end: no subtraction."""
    return vb.flip(2).cumsum_(2).flip(2)  # (B, n, c, ...)


def _unblocked(P: torch.Tensor, T: int) -> torch.Tensor:
    return P.flatten(1, 2)[:, :T]  # (B, T, ...)


def causal_window_sum(v: torch.Tensor, window: int, block: int) -> torch.Tensor:
    """out[:, i] = sum of v[:, j] for max(0, i - window + 1) <= j <= i.   (B, T, ...)"""
    T = v.size(1)
    if window >= T:  # global: prefix sums within blocks, plus the carried block totals
        P = _blocked(v, min(block, T)).cumsum(2)  # (B, n, c, ...)
        if P.size(1) > 1:
            P[:, 1:] += P[:, :-1, -1].cumsum(1).unsqueeze(2)  # (B, n-1, 1, ...) carry
        return _unblocked(P, T)
    vb = _blocked(v, window)  # (B, n, k, ...) blocks of exactly one window
    P = vb.cumsum(2)  # (B, n, k, ...) own block up to i
    P[:, 1:, :-1] += _suffix(vb)[:, :-1, 1:]  # (B, n-1, k-1, ...) previous block after i-k
    return _unblocked(P, T)


def anticausal_window_sum(v: torch.Tensor, window: int, block: int) -> torch.Tensor:
    """out[:, j] = sum of v[:, i] for j <= i <= min(T - 1, j + window - 1).   (B, T, ...)"""
    T = v.size(1)
    if window >= T:  # global: suffix sums within blocks, plus the later blocks' totals
        R = _suffix(_blocked(v, min(block, T)))  # (B, n, c, ...)
        if R.size(1) > 1:
            later = R[:, 1:, 0].flip(1).cumsum(1).flip(1)  # (B, n-1, ...) blocks after b
            R[:, :-1] += later.unsqueeze(2)  # (B, n-1, c, ...)
        return _unblocked(R, T)
    vb = _blocked(v, window)  # (B, n, k, ...)
    R = _suffix(vb)  # (B, n, k, ...) own block from j on
    R[:, :-1, 1:] += vb.cumsum(2)[:, 1:, :-1]  # (B, n-1, k-1, ...) next block up to j+k-1
    return _unblocked(R, T)


# ---------------------------------------------------------------------------------------
# Pooling: forward and hand-written backward in one autograd Function.


def _logits(xhat: torch.Tensor, w_hat: torch.Tensor, rescale: float) -> torch.Tensor:
    """a = s (x^ . w^) / h.   xhat (B, T, H, h), w_hat (H, h) -> (B, T, H)"""
    return (xhat * w_hat).sum(-1) * (rescale / xhat.size(-1))  # (B, T, H)


def _entries(xhat: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Terms of the window sums [e x^, e].   xhat (B, T, H, h), e (B, T, H) -> (B, T, H, h+1)"""
    if torch.is_grad_enabled() and (xhat.requires_grad or e.requires_grad):  # step() under autograd
        return torch.cat([xhat * e.unsqueeze(-1), e.unsqueeze(-1)], -1)
    B, T, H, h = xhat.shape
    v = xhat.new_empty(B, T, H, h + 1)  # (B, T, H, h+1)
    torch.mul(xhat, e.unsqueeze(-1), out=v[..., :h])  # (B, T, H, h) written in place
    v[..., h] = e
    return v


def pool_entries(x: torch.Tensor, w_hat: torch.Tensor, rescale: float) -> torch.Tensor:
    """[e^{a-s} x^, e^{a-s}] per token.   x (B, T, H, h), w_hat (H, h) -> (B, T, H, h+1)"""
    xhat, _ = normalise(x.to(compute_dtype(x.dtype)))  # (B, T, H, h) fp32
    e = torch.exp(_logits(xhat, w_hat.to(xhat.dtype), rescale) - rescale)  # (B, T, H) in (e^-2s, 1]
    return _entries(xhat, e)  # (B, T, H, h+1)


def pool_finish(sums: torch.Tensor, eps_shifted: float) -> tuple[torch.Tensor, torch.Tensor]:
    """g = N / (Z + eps) from sums [N, Z] (B, T, H, h+1) -> g (B, T, H, h), Z (B, T, H)"""
    z = sums[..., -1] + eps_shifted  # (B, T, H) >= e^{-2s}: never zero
    return sums[..., :-1] / z.unsqueeze(-1), z  # (B, T, H, h), (B, T, H)


class _Pool(torch.autograd.Function):
    """g = Pool_k(norm(x), logits s norm(x).w^/h); saves x, Z and g, recomputes the rest."""

    @staticmethod
    def forward(ctx, x, w_hat, rescale: float, window: int, eps_shifted: float, block: int):
        with torch.autocast(x.device.type, enabled=False):  # all of it in fp32 (or fp64)
            v = pool_entries(x, w_hat, rescale)  # (B, T, H, h+1)
            sums = causal_window_sum(v, window, block)  # (B, T, H, h+1)
            del v
            g, z = pool_finish(sums, eps_shifted)  # (B, T, H, h), (B, T, H)
        ctx.save_for_backward(x, w_hat, z, g)
        ctx.settings = (rescale, window, block)
        return g

    @staticmethod
    def backward(ctx, grad_g):
        x, w_hat, z, g = ctx.saved_tensors
        rescale, window, block = ctx.settings
        with torch.autocast(x.device.type, enabled=False):
            dx, dw = _pool_backward(x, w_hat, z, g, grad_g.to(g.dtype), rescale, window, block)
        return dx.to(x.dtype), dw.to(w_hat.dtype), None, None, None, None


def _pool_backward(x, w_hat, z, g, grad_g, rescale: float, window: int, block: int):
    """Gradients of g_i = sum_{j in W(i)} e_j x^_j / Z_i w.r.t. x and w^.

    With u_i = dg_i / Z_i and b_i = -(dg_i . g_i) / Z_i, summed over the windows that
    contain j (an anti-causal window sum): U_j = sum u_i, B_j = sum b_i, then
    dL/dx^_j = e_j U_j + (s/h) w^ da_j  and  da_j = e_j (x^_j . U_j + B_j).
    Weights are taken unshifted here, e^{a} and Z e^{s}, both within e^{+-s}: products of
    the two stay inside fp32's range for s <= 40. Updates run in place to bound memory.
    """
    h = x.size(-1)
    c = rescale / h
    xhat, std = normalise(x.to(g.dtype))  # (B, T, H, h), (B, T, H, 1)
    w_hat = w_hat.to(g.dtype)  # (H, h)
    ea = torch.exp(_logits(xhat, w_hat, rescale))  # (B, T, H) e^{a} in (e^-s, e^s)
    z_true = z * math.exp(rescale)  # (B, T, H) sum of e^{a} (+ eps)
    v = _entries(grad_g, z_true.reciprocal())  # (B, T, H, h+1) [u = dg / Z, 1 / Z]
    v[..., h] = (grad_g * g).sum(-1).div_(z_true).neg_()  # (B, T, H) b = -(dg . g) / Z
    sums = anticausal_window_sum(v, window, block)  # (B, T, H, h+1) [U, B]
    del v
    U, Bsum = sums[..., :h], sums[..., h]  # (B, T, H, h), (B, T, H)
    da = ((xhat * U).sum(-1) + Bsum).mul_(ea)  # (B, T, H) dL/da
    dxhat = U * ea.unsqueeze(-1)  # (B, T, H, h)
    del sums, U, Bsum
    dxhat.addcmul_(da.unsqueeze(-1), w_hat, value=c)  # (B, T, H, h) + through the logits
    dw = torch.einsum("bth,bthd->hd", da, xhat) * c  # (H, h)
    # Through x^ = (x - mean) / rho, rho = std + eps, std = |x - mean| / sqrt(h-1):
    # dx = P[dx^ / rho + (dL/drho) x^ rho / ((h-1) std)], P removing the mean; x^ = 0 where std = 0.
    rho = std + NORM_EPS  # (B, T, H, 1)
    drho = (dxhat * xhat).sum(-1, keepdim=True).div_(rho).neg_()  # (B, T, H, 1)
    coef = drho * rho / ((h - 1) * std.clamp_min(torch.finfo(std.dtype).tiny))  # (B, T, H, 1)
    dx = dxhat.div_(rho).addcmul_(coef, xhat)  # (B, T, H, h) in place of dx^
    return dx.sub_(dx.mean(-1, keepdim=True)), dw


def pool(x: torch.Tensor, w: torch.Tensor, spec: PoolSpec, window: int) -> torch.Tensor:
    """Causal additive pooling of x (B, T, H, h) against head vectors w (H, h) -> g (B, T, H, h).

    g is in fp32 (fp64 for fp64 input), whatever the input dtype or autocast state.
    """
    w_hat, _ = normalise(w.to(compute_dtype(w.dtype)))  # (H, h) its scale is irrelevant
    return _Pool.apply(x, w_hat, spec.rescale, window, spec.eps_shifted(), spec.block)


# ---------------------------------------------------------------------------------------
# Incremental form: running sums (global) or a buffer of the last k entries (windowed).


def step_global(x, w, spec: PoolSpec, sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global pooling of t new tokens given running sums [S, Z] (B, H, h+1) of the prefix."""
    w_hat, _ = normalise(w.to(compute_dtype(w.dtype)))  # (H, h)
    v = pool_entries(x, w_hat, spec.rescale)  # (B, t, H, h+1)
    new = causal_window_sum(v, v.size(1), spec.block) + sums.unsqueeze(1)  # (B, t, H, h+1)
    g, _ = pool_finish(new, spec.eps_shifted())  # (B, t, H, h)
    return g, new[:, -1].clone()  # (B, t, H, h), (B, H, h+1) own storage, not a view of new


def step_window(x, w, spec: PoolSpec, window: int, ring: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Windowed pooling of t new tokens given the last k entries (B, k, H, h+1), oldest first.

    Each window sum is recomputed from the entries themselves (exact, no running
    difference); unfilled slots are zeros and weigh nothing.
    """
    w_hat, _ = normalise(w.to(compute_dtype(w.dtype)))  # (H, h)
    v = pool_entries(x, w_hat, spec.rescale)  # (B, t, H, h+1)
    t = v.size(1)
    seq = torch.cat([ring[:, 1:], v], dim=1)  # (B, k-1+t, H, h+1) all the windows need
    sums = causal_window_sum(seq, window, spec.block)[:, -t:]  # (B, t, H, h+1)
    g, _ = pool_finish(sums, spec.eps_shifted())  # (B, t, H, h)
    ring = torch.cat([ring, v], dim=1)[:, -window:].contiguous()  # (B, k, H, h+1) own storage
    return g, ring
