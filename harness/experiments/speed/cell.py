"""`speed` cells: time and peak memory of forward, training step and decode against
sequence length, for one (variant, model size, seed).

For each mode the lengths are swept upward in two passes:

1. Isolation pass, one fresh process per point (``attnbench.experiments.speed.memory.measure_peak``;
   on CUDA one per sweep, ``measure_peaks``): the
   point is set up and called once; this is the peak-memory measurement (CPU: VmHWM
   reset after setup; CUDA: the allocator's peak), under the point's time limit and, on
   CPU, an address-space cap. A point that runs out of memory, times out or raises here
   is stored with that status, and the longer lengths are not attempted.
2. Timing pass, in this process, through pytest-benchmark (``attnbench.experiments.speed.timing``) for
   the points that passed: calibrated rounds, median and spread, machine info. A point
   failing here is stored likewise and ends the sweep of that mode.

Failures are data: every point yields a "time_s" and a "peak_memory_bytes" row whose
``tags["status"]`` is "ok", "oom", "killed", "timeout", "error" or "skipped" (value null unless
ok), and the sweep goes on with the next mode. Rows also record the path that ran: the
SDPA kernel seen by the profiler, the dtype, the mixers' ``describe_path()`` (see
``attnbench.experiments.speed.points``) and whether a fallback ran.
"""

from __future__ import annotations

import collections
import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attnbench.contract.variant import Variant
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext
from attnbench.experiments.speed.fits import finalize_speed
from attnbench.experiments.speed.memory import PeakMemory, measure_peak, measure_peaks
from attnbench.experiments.speed.points import PointSpec, classify_message, for_child
from attnbench.experiments.speed.timing import PointTiming, SweepTiming, TimingOptions, noise, time_sweep
from attnbench.nn.backbone import Backbone
from attnbench.plan.cells import Cell
from attnbench.plan.speed_spec import SpeedSpec
from attnbench.store.database import Result
from attnbench.store.provenance import device_name

ISOLATED_TARGET = "attnbench.experiments.speed.points:isolated_point"
DTYPE_LABELS = {"fp32": "fp32", "bf16": "bf16-autocast"}


def resolve_dtype(requested: str, device: torch.device) -> str:
    """ "auto" is fp32 on CPU (bf16 matmuls are slow there) and bf16 autocast on CUDA."""
    if requested == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return requested


def memory_limit_bytes(limit_gb: float | None, device: torch.device) -> int | None:
    """CPU cap on what one isolated point may allocate: the suite's, else half of the
    memory available now (None on CUDA, where the device's own memory is the limit)."""
    if device.type == "cuda":
        return None
    if limit_gb is not None:
        return int(limit_gb * 2**30)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return None


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _short(message: str | None) -> str | None:
    """The last line of a traceback (the exception itself), for row tags."""
    if not message:
        return message
    lines = [ln for ln in message.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else message


def isolate(
    specs: list[PointSpec], time_limit_s: float, limit: int | None, threads: int | None, progress=None
) -> dict[int, PeakMemory]:
    """Pass 1: each point once in a fresh process (on CUDA, the whole sweep in one fresh
    process: a process and CUDA start per point cost more than most points), increasing T,
    up to the first failure."""
    calls = [
        {"spec": for_child(spec), "device": spec.device, "memory_limit_bytes": limit, "threads": threads}
        for spec in specs
    ]
    if specs and all(spec.device.startswith("cuda") for spec in specs):
        peaks = measure_peaks(ISOLATED_TARGET, calls, timeout=time_limit_s)
    else:
        peaks = []
        for call in calls:
            peaks.append(measure_peak(ISOLATED_TARGET, timeout=time_limit_s, **call))
            if peaks[-1].status != "ok":
                break
    out: dict[int, PeakMemory] = {}
    for i, (spec, peak) in enumerate(zip(specs, peaks, strict=False)):
        status, error = classify_message(peak.status, _short(peak.error) or "")
        out[spec.T] = replace(peak, status=status, error=error)
        if progress:
            progress(i + 1)
    return out


def _path_tags(extra: dict[str, Any]) -> dict[str, Any]:
    if not extra:  # the point did not run in-process: nothing is known of its path
        return {"backend": "unknown", "fallback": None, "path": {}}
    backend, path = extra.get("backend", "unknown"), extra.get("path", {}) or {}
    fallback = "math" in backend.split("+") or bool(path.get("fallback", False))
    return {"backend": backend, "fallback": fallback, "path": path}


def point_rows(
    mode: str,
    T: int,
    status: str,
    peak: PeakMemory | None,
    timing: PointTiming | None,
    dtype: str,
    batch_size: int,
    decode_tokens: int,
    error: str | None = None,
) -> list[Result]:
    """The "time_s" and "peak_memory_bytes" rows of one point."""
    extra = timing.extra if timing is not None else {}
    base: dict[str, Any] = {
        "mode": mode,
        "T": T,
        "dtype": DTYPE_LABELS.get(dtype, dtype),
        "batch_size": batch_size,
        "compile": extra.get("compile"),
        **_path_tags(extra),
    }
    if mode == "decode":
        base.update(context=T, decode_tokens=decode_tokens, state_bytes=extra.get("state_bytes"))
    t_status = timing.status if timing is not None else status
    t_tags = {**base, "status": t_status}
    time_value = None
    s = timing.stats if timing is not None else None
    if t_status == "ok" and s is not None:  # an ok timing carries pytest-benchmark's stats
        div = extra.get("per_call_divisor", 1)  # decode: seconds per generated token
        time_value = s["median"] / div
        t_tags.update(
            stddev_s=s["stddev"] / div,
            iqr_s=s["iqr"] / div,
            min_s=s["min"] / div,
            mean_s=s["mean"] / div,
            rounds=s["rounds"],
            iterations=s["iterations"],
            tokens_per_s=extra.get("tokens_per_call", 0) / s["median"],
            cv=s["stddev"] / s["mean"] if s["mean"] else None,
            attempts=extra.get("attempts", 1),
            noisy=bool(extra.get("noisy_reason")),
            noisy_reason=extra.get("noisy_reason"),
            load_before=extra.get("load_before"),
            load_after=extra.get("load_after"),
        )
    else:
        t_tags["error"] = (timing.error if timing is not None else None) or error
    m_status = peak.status if peak is not None else status
    m_tags = {
        **base,
        "status": m_status,
        "memory_method": peak.method if peak is not None and peak.method else None,
        "memory_process": peak.process if peak is not None and peak.process else None,
    }
    if m_status != "ok":
        m_tags["error"] = (peak.error if peak is not None else None) or error
    return [
        Result("time_s", time_value, "s", t_tags),
        Result("peak_memory_bytes", peak.bytes if peak is not None and m_status == "ok" else None, "B", m_tags),
    ]


def sweep_rows(
    mode: str,
    lengths: list[int],
    peaks: dict[int, PeakMemory],
    timing: SweepTiming | None,
    dtype: str,
    batch_size: int,
    decode_tokens: int,
) -> tuple[list[Result], dict[str, Any] | None]:
    """Rows of one mode's sweep and its first failure; every point after the first
    failed one (isolated or timed) is "skipped"."""
    rows: list[Result] = []
    failed: dict[str, Any] | None = None
    for T in lengths:
        args = (dtype, batch_size, decode_tokens)
        if failed is not None:
            why = f"skipped after {failed['status']} at T={failed['T']}"
            rows += point_rows(mode, T, "skipped", None, None, *args, error=why)
            continue
        peak = peaks[T]
        if peak.status != "ok":
            rows += point_rows(mode, T, peak.status, peak, None, *args, error=peak.error)
            failed = {"T": T, "status": peak.status, "error": peak.error, "stage": "isolated"}
            continue
        timed = timing.points[T] if timing is not None else PointTiming("error", error="not timed")
        rows += point_rows(mode, T, timed.status, peak, timed, *args)
        if timed.status != "ok":
            failed = {"T": T, "status": timed.status, "error": timed.error, "stage": "timing"}
    return rows, failed


def _judge(timed: PointTiming, attempts: int) -> PointTiming:
    if timed.status == "ok":
        timed.extra.update(attempts=attempts, noisy_reason=noise(timed.stats or {}, timed.extra))
    return timed


def _cv(timed: PointTiming) -> float:
    s = timed.stats or {}
    return s["stddev"] / s["mean"] if s.get("mean") else float("inf")


def timed_with_remeasure(
    specs: list[PointSpec], options: TimingOptions, workdir: Path, max_remeasure: int
) -> SweepTiming | None:
    """Time a sweep; each noisy point (spread or load, see ``timing.noise``) is timed again,
    at most ``max_remeasure`` times, keeping a clean attempt, else the least spread one.
    Points still noisy carry ``noisy_reason``; nothing is dropped."""
    if not specs:
        return None
    timing = time_sweep(specs, options, workdir / "attempt-1")
    for timed in timing.points.values():
        _judge(timed, 1)
    for attempt in range(2, max_remeasure + 2):
        again = [s for s in specs if timing.points[s.T].status == "ok" and timing.points[s.T].extra["noisy_reason"]]
        if not again:
            break
        retry = time_sweep(again, options, workdir / f"attempt-{attempt}")
        for spec in again:
            old, new = timing.points[spec.T], retry.points.get(spec.T)
            if new is not None and new.status == "ok":
                _judge(new, attempt)
                if not new.extra["noisy_reason"] or _cv(new) < _cv(old):
                    timing.points[spec.T] = old = new
            old.extra["attempts"] = attempt
    return timing


def _n_params(variant: Variant, cell: Cell, model_kind: str) -> int | None:
    try:
        torch.manual_seed(cell.seed)
        own = variant.build_model if model_kind == "own" else None
        model = own(cell.model) if own is not None else Backbone(cell.model, variant.build_mixer)
        return model.num_params()
    except Exception:
        return None


def _point_spec(cell: Cell, mode: str, T: int, device: str, dtype: str, builder: Any) -> PointSpec:
    spec = cell.spec_as(SpeedSpec)
    return PointSpec(
        cell.variant,
        mode,
        T,
        cell.model,
        spec.batch_size,
        device,
        dtype,
        cell.seed,
        spec.decode_tokens,
        spec.model_kind,
        compile=spec.compile,
        builder=builder,
    )


def _benchmark(spec: SpeedSpec, version: str | None) -> dict[str, Any]:
    """The timing tool and the options it ran with."""
    options = {k: getattr(spec, k) for k in ("min_rounds", "max_time", "warmup", "max_remeasure")}
    return {"tool": "pytest-benchmark", "version": version, "options": options}


def run_speed_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    spec = cell.spec_as(SpeedSpec)
    device = ctx.device
    dtype = resolve_dtype(spec.dtype, device)
    limit = memory_limit_bytes(spec.memory_limit_gb, device)
    options = TimingOptions(spec.min_rounds, spec.max_time, spec.warmup)
    builder = variant.build_model if spec.model_kind == "own" else variant.build_mixer
    total = sum(len(spec.sweep(m)) for m in spec.modes)
    rows: list[Result] = []
    failures: dict[str, Any] = {}
    machine_info, version, done = None, None, 0
    with _threads(spec.threads), tempfile.TemporaryDirectory(prefix="attnbench-speed-") as tmp:
        for mode in spec.modes:
            lengths = spec.sweep(mode)
            dec = (spec.batch_size, spec.decode_tokens)
            if mode == "decode" and variant.decode == "none":
                why = f"variant {variant.name!r} has no incremental decoding (decode: none)"
                for T in lengths:
                    rows += point_rows(mode, T, "skipped", None, None, dtype, *dec, error=why)
                done += len(lengths)
                ctx.progress(done, total, None)
                continue
            specs = [_point_spec(cell, mode, T, str(device), dtype, builder) for T in lengths]
            peaks = isolate(
                specs,
                spec.time_limit_s,
                limit,
                spec.threads,
                progress=lambda i, d=done, ls=lengths, m=mode: ctx.progress(
                    d + i, total, None, label=f"{m} T={ls[i - 1]}"
                ),
            )
            ok = [s for s in specs if s.T in peaks and peaks[s.T].status == "ok"]
            timing = timed_with_remeasure(ok, options, Path(tmp) / mode, spec.max_remeasure)
            if timing is not None:
                machine_info = machine_info or timing.machine_info
                version = version or timing.benchmark_version
            mode_rows, failed = sweep_rows(mode, lengths, peaks, timing, dtype, *dec)
            rows += mode_rows
            if failed:
                failures[mode] = failed
            done += len(lengths)
            ctx.progress(done, total, None)
        threads = torch.get_num_threads()
    counts = collections.Counter(r.tags["status"] for r in rows if r.name == "time_s")
    summary = {
        "device": device_name(device),
        "dtype": DTYPE_LABELS.get(dtype, dtype),
        "threads": threads,
        "compile": spec.compile,
        "n_params": _n_params(variant, cell, spec.model_kind),
        "memory_limit_bytes": limit,
        "lengths": {m: spec.sweep(m) for m in spec.modes},
        "points": dict(counts),
        "first_failure": failures,
        "benchmark": _benchmark(spec, version),
        "machine_info": machine_info,
    }
    return _outcome(summary, rows)


def _outcome(summary: dict[str, Any], rows: list[Result]) -> CellOutcome:
    """The cell's outcome: done, or failed where a point was killed (not a measurement: the next
    run retries the cell and measures every point again)."""
    killed = sorted({f"{r.tags['mode']} T={r.tags['T']}" for r in rows if r.tags.get("status") == "killed"})
    if killed:
        why = f"speed point(s) {', '.join(killed)} killed by SIGKILL (the OOM killer, or a kill -9); run again"
        return CellOutcome("failed", summary, results=rows, error=why)
    return CellOutcome("done", summary, results=rows)


KIND = Kind(
    "speed", run_speed_cell, code=(*COMMON_CODE, "attnbench.experiments.speed"), finalize=finalize_speed, timed=True
)
