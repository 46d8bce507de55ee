"""flash-linear-attention's Triton kernels for the recurrent mixers (kernel: fla), CUDA only.
Our tensors are (B, H, T, ...); fla's are (B, T, H, ...). The forward only, from an empty
state: decoding stays on our kernels, so the gate checks one against the other.
fla wraps each op in torch.compiler.disable, whose annotation hides the op's signature from
the checker: the calls silence reportCallIssue for that reason alone."""

from __future__ import annotations

import torch

FLA_OPS = {
    "retnet": "fla.ops.retention.chunk_retention",
    "gla": "fla.ops.gla.chunk_gla",
    "deltanet": "fla.ops.delta_rule.chunk_delta_rule",
    "gated_deltanet": "fla.ops.gated_delta_rule.chunk_gated_delta_rule",
}


def _bthd(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.transpose(1, 2).contiguous().to(dtype)  # (B, T, H, ...)


def _bhtd(o: torch.Tensor) -> torch.Tensor:
    return o.transpose(1, 2)  # (B, H, T, d_v)


def fla_retention(q, k, v, scale: float) -> torch.Tensor:
    """q, k (B, H, T, d_k), v (B, H, T, d_v) -> o (B, H, T, d_v); fla's decays are RetNet's."""
    from fla.ops.retention import chunk_retention

    o, _ = chunk_retention(_bthd(q, v.dtype), _bthd(k, v.dtype), _bthd(v, v.dtype), scale=scale)  # pyright: ignore[reportCallIssue]
    return _bhtd(o)


def fla_gla(q, k, v, g, scale: float) -> torch.Tensor:
    """g (B, H, T, d_k) log decays, kept fp32."""
    from fla.ops.gla import chunk_gla

    o, _ = chunk_gla(_bthd(q, v.dtype), _bthd(k, v.dtype), _bthd(v, v.dtype), _bthd(g, torch.float32), scale=scale)  # pyright: ignore[reportCallIssue]
    return _bhtd(o)


def fla_delta_rule(q, k, v, beta, g, scale: float) -> torch.Tensor:
    """beta (B, H, T); g (B, H, T) log decays (Gated DeltaNet) or None (DeltaNet)."""
    qq, kk, vv, bb = _bthd(q, v.dtype), _bthd(k, v.dtype), _bthd(v, v.dtype), _bthd(beta, v.dtype)  # (B, T, H, ...)
    if g is None:
        from fla.ops.delta_rule import chunk_delta_rule

        o, _ = chunk_delta_rule(qq, kk, vv, bb, scale=scale)  # pyright: ignore[reportCallIssue]
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        o, _ = chunk_gated_delta_rule(qq, kk, vv, _bthd(g, torch.float32), bb, scale=scale)  # pyright: ignore[reportCallIssue]
    return _bhtd(o)
