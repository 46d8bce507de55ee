"""Peak-memory measurement of one operation in a fresh, isolated process.

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


def _child(target: str, kwargs: dict[str, Any], conn) -> None:
    import gc

    import torch

    try:
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
            conn.send(PeakMemory(torch.cuda.max_memory_allocated() - base, "cuda-allocator"))
            return
        if _reset_hwm():
            base = _status_kb("VmRSS")
            run()
            conn.send(PeakMemory((_status_kb("VmHWM") - base) * 1024, "cpu-vmhwm-reset"))
        else:
            import resource

            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            run()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            conn.send(PeakMemory((peak - base) * 1024, "cpu-ru_maxrss"))
    except torch.OutOfMemoryError as exc:
        conn.send(PeakMemory(None, "", "oom", str(exc).splitlines()[0]))
    except MemoryError as exc:
        conn.send(PeakMemory(None, "", "oom", f"MemoryError: {exc}"))
    except Exception:
        conn.send(PeakMemory(None, "", "error", traceback.format_exc(limit=3)))


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
