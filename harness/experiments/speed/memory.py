"""Peak-memory measurement of one operation in a fresh, isolated process (``measure_peak``),
or, on CUDA, of a sweep of operations in one fresh process (``measure_peaks``).

CPU: the process's resident-set high-water mark (VmHWM) is reset after setup by writing
"5" to /proc/self/clear_refs, so the figure is the peak *added* by the operation alone.
CUDA: the caching allocator's peak (``torch.cuda.max_memory_allocated``) over the call.

A CPU point's process is forked from a fork server that has imported torch and never run a
torch operation (so no thread pool exists to be forked): it starts in milliseconds, where a
spawned interpreter spends ~1.5-2 s of CPU importing torch, most of a small point's cost.
Where a platform has no fork server (Windows), points are spawned. CUDA sweeps are spawned
(a forked child must not inherit a CUDA context). ``PeakMemory.process`` says which.
A forked child maps its libraries' pages before setup (``_map_file_pages``): a spawned one
counts the library code its first call faults in (~4 MB for a 256 x 256 matmul, against
0.75 MB forked; benchmarks/bench_isolation.py), so forked peaks are the data the call added.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import sys
import traceback
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class PeakMemory:
    bytes: int | None  # peak added by the operation; None when it failed
    method: str  # "cpu-vmhwm-reset", "cpu-ru_maxrss" or "cuda-allocator"
    status: str = "ok"  # "ok", "oom" or "error"
    error: str = ""
    process: str = ""  # how the fresh process started: "forkserver" or "spawn"


# The fork server's preload: torch and the modules a point's setup imports, once per run.
PRELOAD = ["torch", __name__, "attnbench.experiments.speed.points", "attnbench.registry.loader"]


def _context(device: str) -> tuple[Any, str]:
    """The multiprocessing context of a fresh point process, and its name for the record."""
    if not str(device).startswith("cuda") and "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)  # read when the server starts (first use)
        return ctx, "forkserver"
    return mp.get_context("spawn"), "spawn"


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _measure(target: str, kwargs: dict[str, Any]) -> PeakMemory:
    """Set one call up (``target(**kwargs)``) and measure the peak it adds, in this process."""
    import gc

    import torch

    module, func = target.split(":")
    run = getattr(importlib.import_module(module), func)(**kwargs)  # setup -> callable
    device = kwargs.get("device", "cpu")
    gc.collect()
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        return PeakMemory(torch.cuda.max_memory_allocated() - base, "cuda-allocator")
    if _reset_hwm():
        base = _status_kb("VmRSS")
        run()
        return PeakMemory((_status_kb("VmHWM") - base) * 1024, "cpu-vmhwm-reset")
    import resource

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return PeakMemory((peak - base) * 1024, "cpu-ru_maxrss")


def _guarded(target: str, kwargs: dict[str, Any]) -> PeakMemory:
    import torch

    try:
        return _measure(target, kwargs)
    except torch.OutOfMemoryError as exc:
        return PeakMemory(None, "", "oom", str(exc).splitlines()[0])
    except MemoryError as exc:
        return PeakMemory(None, "", "oom", f"MemoryError: {exc}")
    except Exception:
        return PeakMemory(None, "", "error", traceback.format_exc(limit=3))


def _map_file_pages() -> None:
    """Map every page of the files this process has mapped (the libraries' code and data),
    as a spawned interpreter has mapped those its imports touched. A forked child inherits the
    mappings but not their page-table entries, so without this the first call's page faults
    on library code would count as memory the operation added (~2 MB for a small matmul).
    Linux >= 5.14 (MADV_POPULATE_READ); elsewhere nothing is done."""
    import ctypes
    import mmap

    advice = getattr(mmap, "MADV_POPULATE_READ", 22)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or not fields[5].startswith("/") or "r" not in fields[1]:
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        libc.madvise(lo, hi - lo, advice)  # a failure (old kernel, odd mapping) leaves faults lazy


def _child(target: str, kwargs: dict[str, Any], conn, forked: dict[str, Any] | None = None) -> None:
    if forked is not None:  # from the fork server, started earlier: the caller's view now
        os.environ.clear()
        os.environ.update(forked["environ"])
        sys.path[:] = forked["path"]
        _map_file_pages()  # its library pages first, so they are not counted
    peak = _guarded(target, kwargs)
    mapped = forked is not None and peak.method
    conn.send(replace(peak, method=f"{peak.method}, file pages mapped first") if mapped else peak)


def _sweep_child(target: str, calls: list[dict[str, Any]], conn) -> None:
    """One call after another, each result sent as it is known, up to the first failure.
    Between calls the previous one's tensors are freed and the CUDA cache emptied, so each
    peak is the allocator's own for that call (max_memory_allocated counts live blocks, not
    the cache)."""
    import gc

    import torch

    for kwargs in calls:
        peak = _guarded(target, kwargs)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        conn.send(peak)
        if peak.status != "ok":
            return


def measure_peak(target: str, timeout: float = 600.0, **kwargs: Any) -> PeakMemory:
    """Peak memory added by one call, measured in a fresh spawned process.

    target: ``"module:function"``; the function is called with ``kwargs`` to set up
    (build the model, make inputs) and returns a zero-argument callable, whose single
    call is measured. A child killed by SIGKILL (the OOM killer, or a kill -9) reports "killed"
    (its cell is stored as failed, so the next run measures it again); one that dies otherwise,
    "error".
    """
    ctx, how = _context(str(kwargs.get("device", "cpu")))
    recv, send = ctx.Pipe(duplex=False)
    caller = {"environ": dict(os.environ), "path": list(sys.path)} if how == "forkserver" else None
    proc = ctx.Process(target=_child, args=(target, kwargs, send, caller), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(timeout):
            result = recv.recv()
        else:
            proc.kill()
            result = PeakMemory(None, "", "timeout", f"no result within {timeout:.0f} s")
    except EOFError:  # the child died without reporting
        proc.join(5)
        result = _died(proc.exitcode)
    proc.join(5)
    return replace(result, process=how)


def measure_peaks(target: str, calls: list[dict[str, Any]], timeout: float = 600.0) -> list[PeakMemory]:
    """``measure_peak`` for several calls in one fresh process, in order, up to the first
    failure (the list is that long): a process start per sweep, not per call. For CUDA only,
    where the allocator's peak is exact per call in a shared process; a CPU's resident-set
    peak is not (memory freed by one call stays resident and hides the next one's). timeout:
    per call. A child killed or timed out during call k stores k's failure."""
    if not calls:
        return []
    if not all(str(kw.get("device", "cpu")).startswith("cuda") for kw in calls):
        raise ValueError("measure_peaks shares a process between calls: CUDA devices only (use measure_peak)")
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_sweep_child, args=(target, calls, send), daemon=True)
    proc.start()
    send.close()
    out: list[PeakMemory] = []
    try:
        for _ in calls:
            if not recv.poll(timeout):
                proc.kill()
                out.append(PeakMemory(None, "", "timeout", f"no result within {timeout:.0f} s"))
                break
            out.append(recv.recv())
            if out[-1].status != "ok":
                break
    except EOFError:  # the child died during a call, without reporting it
        proc.join(5)
        out.append(_died(proc.exitcode))
    proc.join(5)
    return [replace(peak, process="spawn") for peak in out]


def _died(exitcode: int | None) -> PeakMemory:
    """What a child that died without a word tells: SIGKILL is the OOM killer's signal; any
    other exit (a crash at import, say) is an error, never reported as memory."""
    if exitcode == -signal.SIGKILL:  # the OOM killer or a kill -9: which one, the exit code cannot tell
        return PeakMemory(
            None,
            "",
            "killed",
            "process killed by SIGKILL (the OOM killer, or a kill -9); measured again on the next run",
        )
    return PeakMemory(
        None,
        "",
        "error",
        f"process died with exit code {exitcode} before reporting (its stderr, above in the log, says why)",
    )
