"""Compute precision: bf16 autocast on CUDA; on a CPU fp32 unless asked (``fp32 | bf16 | auto``).
One place, so training, evaluation and decoding agree on what ran. CPUs differ: bf16 matmul
is ~150x slower than fp32 on AVX2-only parts and ~2x faster with AVX512-BF16 or AMX, so
``auto`` measures instead of assuming: a few training steps of the run's own model in each
(a matmul probe where no model is at hand), bf16 only where it wins."""

from __future__ import annotations

import contextlib
import functools
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SETTINGS = ("fp32", "bf16", "auto")
AUTO_MIN_SPEEDUP = 1.2  # auto picks bf16 only when the probe's bf16 matmul is at least this much faster
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # reported, never relied on


@dataclass(frozen=True)
class Precision:
    """What a run computes in, and why: recorded with its results."""

    dtype: str  # "fp32" or "bf16-autocast"
    setting: str  # what was asked: fp32, bf16 or auto (CUDA: its fixed rule)
    reason: str
    probe: dict[str, Any] = field(default_factory=dict)  # auto's matmul timings and the CPU's features

    def record(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "precision": self.setting, "precision_reason": self.reason, **self.probe}


def cpu_features() -> dict[str, Any]:
    """The CPU's name, torch's vector capability and its bf16-related flags (Linux /proc/cpuinfo)."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    return {
        "cpu": model or platform.processor(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": [f for f in CPU_FLAGS if f in flags],
    }


@functools.cache
def bf16_probe(n: int = 256, reps: int = 5) -> dict[str, Any]:
    """Best-of-``reps`` n x n matmul in fp32 and in bf16 on this CPU (interleaved, after a warm-up)."""
    a32, b32 = torch.randn(n, n), torch.randn(n, n)  # (n, n)
    a16, b16 = a32.bfloat16(), b32.bfloat16()  # (n, n)
    best = {"fp32": float("inf"), "bf16": float("inf")}
    for i in range(reps + 1):  # the first round is the warm-up
        for name, (a, b) in (("fp32", (a32, b32)), ("bf16", (a16, b16))):
            start = time.perf_counter()
            _ = a @ b  # (n, n) timed, result unused
            if i:
                best[name] = min(best[name], time.perf_counter() - start)
    gflops = {k: 2 * n**3 / v / 1e9 for k, v in best.items()}
    return {
        "probe_fp32_gflops": gflops["fp32"],
        "probe_bf16_gflops": gflops["bf16"],
        "probe_bf16_speedup": gflops["bf16"] / gflops["fp32"],
        "probe_method": f"best of {reps} {n}x{n} matmuls, torch threads {torch.get_num_threads()}",
        **cpu_features(),
    }


def step_probe(step: Callable[[], None], reps: int = 3) -> dict[str, Any]:
    """Best-of-``reps`` seconds of ``step`` (one training forward + backward of the run's own
    model) in fp32 and under bf16 autocast, interleaved, after a warm-up of each. A matmul
    alone misleads: on an AMX CPU bf16 multiplies 256 x 256 at ~4x fp32, yet small models'
    steps (casts, elementwise work, fp32 kernels inside) ran 1.3x slower in bf16 (measured)."""
    best = {"fp32": float("inf"), "bf16": float("inf")}
    with torch.random.fork_rng():  # dropout draws here leave the run's RNG as it was
        for i in range(reps + 1):  # the first round is the warm-up
            for name in best:
                amp = torch.autocast("cpu", dtype=torch.bfloat16) if name == "bf16" else contextlib.nullcontext()
                start = time.perf_counter()
                with amp:
                    step()
                if i:
                    best[name] = min(best[name], time.perf_counter() - start)
    return {
        "probe_step_fp32_s": best["fp32"],
        "probe_step_bf16_s": best["bf16"],
        "probe_step_bf16_speedup": best["fp32"] / best["bf16"],
        "probe_step_method": f"best of {reps} training forward + backward steps of the run's model, interleaved",
    }


def resolve(device: torch.device, setting: str = "fp32", step: Callable[[], None] | None = None) -> Precision:
    """The precision a run on ``device`` uses for ``setting`` (CUDA: bf16 autocast whatever is asked).
    ``auto`` on a CPU decides by ``step`` (one forward + backward of the run's model, timed by
    ``step_probe``) where given, else by the matmul probe; both probes' figures are recorded."""
    if setting not in SETTINGS:
        raise ValueError(f"precision must be one of {list(SETTINGS)}, got {setting!r}")
    if device.type == "cuda":
        return Precision("bf16-autocast", setting, "CUDA: bf16 autocast")
    if device.type != "cpu" or setting == "fp32":
        return Precision("fp32", setting, "fp32 asked" if setting == "fp32" else f"{device.type}: fp32")
    if setting == "bf16":
        return Precision("bf16-autocast", setting, "bf16 asked")
    probe = dict(bf16_probe())
    what, speedup = "bf16 matmul", probe["probe_bf16_speedup"]
    if step is not None:
        probe |= step_probe(step)
        what, speedup = "bf16 training step", probe["probe_step_bf16_speedup"]
    fast = speedup >= AUTO_MIN_SPEEDUP
    why = f"probe: {what} {speedup:.2f}x fp32 ({'>=' if fast else '<'} {AUTO_MIN_SPEEDUP})"
    return Precision("bf16-autocast" if fast else "fp32", setting, why, probe)


def autocast_for(device: torch.device, precision: Precision | None = None) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA, and on a CPU whose resolved precision says bf16; else nothing (fp32)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if precision is not None and precision.dtype == "bf16-autocast":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compute_dtype(device: torch.device, precision: Precision | None = None) -> str:
    if device.type == "cuda":
        return "bf16-autocast"
    return precision.dtype if precision is not None else "fp32"
