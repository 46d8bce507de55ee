"""The device's measured dense-matmul throughput: the denominator of model FLOPs
utilisation (MFU), measured rather than looked up, in the dtype training computes in
(bf16 on CUDA, fp32 on CPU)."""

from __future__ import annotations

import functools
import time
from typing import Any

import torch


@functools.cache
def matmul_peak(device: str, dtype: str) -> dict[str, Any]:
    """Best of several timed square matmuls (after warm-up): FLOP/s and how it was measured."""
    dev = torch.device(device)
    n, reps = (8192, 20) if dev.type == "cuda" else (1024, 8)
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    a = torch.randn(n, n, device=dev, dtype=torch_dtype)  # (n, n)
    b = torch.randn(n, n, device=dev, dtype=torch_dtype)  # (n, n)
    best = float("inf")
    for i in range(reps + 3):  # 3 warm-up calls, then the timed ones
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        _ = a @ b  # (n, n) timed, result unused
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= 3:
            best = min(best, time.perf_counter() - start)
    return {"peak_flops_per_s": 2 * n**3 / best, "method": f"best of {reps} {dtype} {n}x{n} matmuls", "device": device}


def mfu(
    train_flops_per_token: float | None, tokens_per_s: float | None, device: torch.device, dtype: str
) -> dict[str, Any]:
    """Model FLOPs utilisation: analytic training FLOPs per second over the measured peak."""
    if not train_flops_per_token or not tokens_per_s:
        return {"mfu": None}
    peak = matmul_peak(str(device), dtype)
    return {
        "mfu": train_flops_per_token * tokens_per_s / peak["peak_flops_per_s"],
        "peak_flops_per_s": peak["peak_flops_per_s"],
        "peak_method": peak["method"],
    }
