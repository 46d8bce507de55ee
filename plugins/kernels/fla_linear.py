"""Causal linear attention through flash-linear-attention's Triton kernels (``fla``): the
library path researchers compare against. Optional, CUDA only; the feature map is applied
before the call, and the normaliser is ours, so the equation is exactly the chunked kernel's:

    o_i = phi(q_i)^T sum_{j<=i} phi(k_j) v_j^T / (phi(q_i)^T sum_{j<=i} phi(k_j) + eps)

Choosing it where it cannot run is an error naming why, never a silent fallback.
"""

from __future__ import annotations

import importlib.util
import os

import torch

FLA_OP = "fla.ops.linear_attn.chunk_linear_attn"
TRITON_FP32 = "TRITON_F32_DEFAULT"  # Triton's default precision for fp32 dot products: tf32 or ieee


def fla_unavailable(device: torch.device) -> str | None:
    """Why the fla path cannot run on ``device``, or None when it can."""
    if device.type != "cuda":
        return f"the fla kernels run on CUDA only (this model is on {device})"
    if importlib.util.find_spec("fla") is None:
        return "flash-linear-attention is not installed (pip install flash-linear-attention)"
    return None


def follow_torch_fp32_precision() -> str:
    """Make fla's fp32 dot products as precise as torch's fp32 matmuls, and say which ran.
    Triton rounds fp32 dot operands to tf32 unless told otherwise, while torch multiplies in
    full fp32 at its default precision "highest": the H100 gate (2026-11-27) saw fla's fp32
    output 2.4e-4 (relative) from our own kernel's at position 0, where both are exact up to
    rounding. Set before the call: fla compiles its kernels, backward ones too, at first use,
    and each compilation reads the variable. A value the user set is left as it is."""
    if not os.environ.get(TRITON_FP32):
        os.environ[TRITON_FP32] = "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    return os.environ[TRITON_FP32]


def fla_linear_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, eps: float) -> torch.Tensor:
    """phi_q, phi_k (B, H, T, h_k) > 0, v (B, H, T, h_v) -> o (B, H, T, h_v), from an empty state."""
    from fla.ops.linear_attn import chunk_linear_attn

    follow_torch_fp32_precision()
    # one dtype for the kernel's dot products: phi is fp32 and v half precision under autocast (the
    # H200 check, 2026-11-27: "Both operands must be same dtype"); the normaliser below stays fp32
    q, k, vv = (t.transpose(1, 2).contiguous().to(v.dtype) for t in (phi_q, phi_k, v))  # (B, T, H, h) fla's layout
    # fla's ops are wrapped in torch.compiler.disable, whose annotation hides their signature from the checker
    num, _ = chunk_linear_attn(q, k, vv, scale=1.0, normalize=False)  # pyright: ignore[reportCallIssue]  # (B, T, H, h_v) phi(q)^T S_i
    num = num.transpose(1, 2).float()  # (B, H, T, h_v)
    z = phi_k.float().cumsum(dim=2)  # (B, H, T, h_k) fp32: the running sum of the whole prefix
    den = (phi_q.float() * z).sum(-1, keepdim=True) + eps  # (B, H, T, 1) eps after the dot product
    return (num / den).to(v.dtype)  # (B, H, T, h_v)
