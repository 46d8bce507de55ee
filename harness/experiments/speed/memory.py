"""Peak-memory measurement of one operation in a fresh, isolated process (``measure_peak``),
or, on CUDA, of a sweep of operations in one fresh process (``measure_peaks``).

CPU: the process's resident-set high-water mark (VmHWM) is reset after setup by writing
"5" to /proc/self/clear_refs, so the figure is the peak *added* by the operation alone.
CUDA: the caching allocator's peak (``torch.cuda.max_memory_allocated``) over the call.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import signal
import traceback
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PeakMemory:
    bytes: int | None  # peak added by the operation; None when it failed
    method: str  # "cpu-vmhwm-reset", "cpu-ru_maxrss" or "cuda-allocator"
    status: str = "ok"  # "ok", "oom" or "error"
    error: str = ""


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


def _child(target: str, kwargs: dict[str, Any], conn) -> None:
    conn.send(_guarded(target, kwargs))


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
    call is measured. A child killed by SIGKILL (the OOM killer) reports "oom"; one that dies
    otherwise, "error".
    """
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(target, kwargs, send), daemon=True)
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
    return result


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
    return out


def _died(exitcode: int | None) -> PeakMemory:
    """What a child that died without a word tells: SIGKILL is the OOM killer's signal; any
    other exit (a crash at import, say) is an error, never reported as memory."""
    if exitcode == -signal.SIGKILL:
        return PeakMemory(None, "", "oom", "process killed by SIGKILL (the OOM killer, most likely)")
    return PeakMemory(
        None,
        "",
        "error",
        f"process died with exit code {exitcode} before reporting (its stderr, above in the log, says why)",
    )
