"""Compute precision: bf16 autocast on CUDA, fp32 on CPU (bf16 matmul is very slow on
AVX2 CPUs). One place, so training, evaluation and decoding agree on what ran."""

from __future__ import annotations

import contextlib

import torch


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; nothing on CPU (fp32: bf16 matmul is very slow on AVX2 CPUs)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compute_dtype(device: torch.device) -> str:
    return "bf16-autocast" if device.type == "cuda" else "fp32"
