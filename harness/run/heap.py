"""The C heap of a process that trains or times models: kept, not handed back to the kernel
after every step (glibc's malloc, on which torch's CPU tensors live).

glibc gives the top of its heap back once more than M_TRIM_THRESHOLD of it is free. By default
that threshold follows the largest block freed so far (twice it, up to 64 MiB), and a train
step at T 8192 frees more than that at its end: the next step takes the pages back one minor
fault at a time, each page zeroed by the kernel. Measured on one CPU thread (2026-11-28, AMD EPYC,
torch 2.13), Mamba2 at d 128, T 8192 took 18,000 faults (26 ms of system time) a step, and its
mixer's forward + backward ran in 0.88x the time with the heap kept; Gated DeltaNet took 22,500
faults a step; softmax, GLA and Based none.

``keep_freed_heap`` sets M_MMAP_THRESHOLD to 32 MiB (glibc's largest; blocks above it still come
from mmap and go back when freed) and M_TRIM_THRESHOLD to 1 GiB, once per process, where a cell
runs (``run_cell``) and in the speed benchmarks. Memory is measured in fresh processes that never
call it, so peak-memory figures are unchanged. What each process ran with is recorded with every
figure (``heap_record``). ``ATTNBENCH_HEAP=system`` leaves the C library's defaults.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

from attnbench.errors import ExecutorError

HEAP_ENV = "ATTNBENCH_HEAP"
CHOICES = ("keep", "system")
# (name, glibc's mallopt parameter number in malloc.h, value), set in this order: the fixed mmap
# threshold first, since fixing either one stops glibc from raising the mmap threshold itself
KEEP = (("M_MMAP_THRESHOLD", -3, 32 << 20), ("M_TRIM_THRESHOLD", -1, 1 << 30))

_record: dict[str, Any] | None = None  # what this process runs with, once decided


def heap_choice() -> str:
    """``ATTNBENCH_HEAP``: keep (the default) or system; anything else is an error."""
    choice = os.environ.get(HEAP_ENV, "keep").strip().lower() or "keep"
    if choice not in CHOICES:
        raise ExecutorError(
            f"{HEAP_ENV}={os.environ[HEAP_ENV]!r}: expected one of {', '.join(CHOICES)} "
            "(keep: the C heap keeps freed memory between steps; system: the C library's defaults)"
        )
    return choice


def keep_freed_heap() -> dict[str, Any]:
    """Set glibc's heap to keep freed memory (once per process) unless ``ATTNBENCH_HEAP=system``
    or the C library is not glibc; return what this process runs with (``heap_record``)."""
    global _record
    if _record is not None:
        return _record
    choice = heap_choice()
    libc, version = platform.libc_ver()
    if choice == "system":
        _record = {"heap": "system", "why": f"{HEAP_ENV}=system"}
    elif libc != "glibc":
        _record = {"heap": "system", "why": f"the C library is {libc or 'unknown'}, not glibc: left as it is"}
    else:
        mallopt = ctypes.CDLL(None).mallopt  # this process's own C library
        done: dict[str, int] = {}
        for name, param, value in KEEP:
            if mallopt(param, value) != 1:  # 1: accepted
                break
            done[name] = value
        _record = {"heap": "keep" if len(done) == len(KEEP) else "partial", "glibc": version, "mallopt": done}
        if len(done) < len(KEEP):
            _record["why"] = f"glibc {version} refused mallopt({KEEP[len(done)][0]}, {KEEP[len(done)][2]})"
    return _record


def heap_record() -> dict[str, Any]:
    """What this process's C heap runs with: the record ``keep_freed_heap`` made, else the
    C library's defaults (a process that never called it)."""
    return _record if _record is not None else {"heap": "system", "why": "not set in this process"}
