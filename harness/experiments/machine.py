"""The machine's state beside every timed figure: load before and after, so that a
number taken while other work competed for the CPUs (or the GPU) is flagged, never
silently reported."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch


def machine_load() -> dict[str, Any]:
    """The machine's state now: 1-minute load average, CPU count, runnable tasks (ours
    included) from /proc/loadavg, and GPU utilisation where torch can read it."""
    out: dict[str, Any] = {"load1": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        with open("/proc/loadavg") as f:
            out["runnable"] = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        pass
    if torch.cuda.is_available():
        with contextlib.suppress(Exception):  # needs pynvml; absent is recorded as absent
            out["gpu_util"] = torch.cuda.utilization()
    return out


def under_load(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Other work competed for the CPUs: the load average exceeded the CPU count + 1 (our
    own threads account for up to the CPU count) before or after the point."""
    cpus = before.get("cpus") or 1
    return max(before.get("load1", 0.0), after.get("load1", 0.0)) > cpus + 1
