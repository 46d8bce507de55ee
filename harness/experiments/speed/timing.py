"""Timing a sweep of speed points with pytest-benchmark, driven programmatically.

How and why:

* pytest-benchmark's public interface is a pytest session: calibrated rounds, warm-up,
  its statistics and the ``--benchmark-json`` file (stats per test + ``machine_info``).
  We run one session per (cell, mode) with ``pytest.main`` on the internal test module
  ``experiments/speed/bench.py``: one parametrized test per length, in increasing order,
  with ``-x`` so the first failing length ends the session (longer ones are "skipped").
  The JSON file is then read back; nothing of pytest-benchmark's internals is used.
* In-process rather than a subprocess per point: no interpreter and torch start per
  point, and in-process plugins (tests, notebooks) time exactly the registered objects.
  What a separate process would protect against (a hang, the OOM killer) is guarded
  before: every point has already run once in a fresh, time-limited, memory-capped
  process (the peak-memory measurement), and only the points that passed there are
  timed here.
* The sweep reaches the session through a plan object registered as a pytest plugin
  (``pytest.main(plugins=[plan])``, then ``config.stash``), not through the environment;
  the session gets its own empty ini file and root, so no project configuration, cache
  or conftest leaks in, and its terminal output is captured (returned as ``log``).
* On CUDA every timed call ends with ``torch.cuda.synchronize`` (see speed_points).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attnbench.experiments.machine import machine_load, under_load
from attnbench.experiments.speed.points import (
    PointSpec,
    build_point,
    classify_failure,
    describe_path,
    release_memory,
    sdpa_backends,
)

if TYPE_CHECKING:
    import pytest

NOISY_CV = 0.20  # a point whose rounds spread more than this (stddev / mean) is re-measured, then flagged
BURN_IN_CALLS = 10  # at most this many untimed calls before a sweep's first point, until two agree


def noise(stats: dict[str, Any], extra: dict[str, Any]) -> str | None:
    """Why a timed point is not trustworthy (None when it is): spread above NOISY_CV, or load."""
    why = []
    cv = stats["stddev"] / stats["mean"] if stats.get("mean") else 0.0
    if cv > NOISY_CV:
        why.append(f"coefficient of variation {cv:.0%} > {NOISY_CV:.0%}")
    before, after = extra.get("load_before") or {}, extra.get("load_after") or {}
    if before and under_load(before, after):
        why.append(
            f"machine under load (load average {before.get('load1', 0):.2f} before, "
            f"{after.get('load1', 0):.2f} after, {before.get('cpus')} CPUs)"
        )
    return "; ".join(why) or None


@dataclass(frozen=True)
class TimingOptions:
    min_rounds: int = 3  # --benchmark-min-rounds
    max_time: float = 1.0  # --benchmark-max-time (seconds of rounds per point, if fast)
    warmup: int = 1  # --benchmark-warmup-iterations; 0 turns pytest-benchmark's warm-up off
    disable_gc: bool = False  # --benchmark-disable-gc

    def args(self) -> list[str]:
        out = [
            f"--benchmark-min-rounds={self.min_rounds}",
            f"--benchmark-max-time={self.max_time}",
            f"--benchmark-warmup={'on' if self.warmup else 'off'}",
            f"--benchmark-warmup-iterations={max(1, self.warmup)}",
        ]
        return out + (["--benchmark-disable-gc"] if self.disable_gc else [])


@dataclass
class PointTiming:
    status: str  # "ok", "oom", "error" or "skipped"
    stats: dict[str, Any] | None = None  # pytest-benchmark's stats of this point's test
    extra: dict[str, Any] = field(default_factory=dict)  # backend, path, point facts
    error: str | None = None


@dataclass
class SweepTiming:
    points: dict[int, PointTiming]  # by T
    machine_info: dict[str, Any] | None
    benchmark_version: str | None
    log: str  # the session's terminal output


class SweepPlan:
    """A pytest plugin carrying one sweep (same variant and mode, increasing T) into the
    session; the internal test calls ``run_point`` for each T."""

    def __init__(self, specs: list[PointSpec]) -> None:
        self.specs = {s.T: s for s in sorted(specs, key=lambda s: s.T)}
        self.failures: dict[int, tuple[str, str]] = {}
        self.interrupted = False
        self.burned_in = False

    def pytest_configure(self, config: pytest.Config) -> None:
        from attnbench.experiments.speed.stash import PLAN_KEY  # pytest loads only inside a sweep

        config.stash[PLAN_KEY] = self

    def lengths(self) -> list[int]:
        return list(self.specs)

    def run_point(self, benchmark: Any, T: int) -> None:
        spec = self.specs[T]
        point = None
        try:
            point = build_point(spec)
            if not self.burned_in:  # first-call costs (thread pools, allocator) must not land on the first T
                burn_in(point.run)
                self.burned_in = True
            backend = sdpa_backends(point.run)  # one profiled call (also a warm-up)
            extra = {
                "backend": backend,
                "path": describe_path(point.model),
                "tokens_per_call": point.tokens_per_call,
                "per_call_divisor": point.per_call_divisor,
                **point.info,
            }
            benchmark.extra_info.update(json.loads(json.dumps(extra, default=str)))
            benchmark.extra_info["load_before"] = machine_load()
            benchmark(point.run)
            benchmark.extra_info["load_after"] = machine_load()
        except KeyboardInterrupt:
            self.interrupted = True
            raise
        except Exception as exc:
            self.failures[T] = classify_failure(exc)
            raise
        finally:
            del point
            release_memory(torch.device(spec.device))


def burn_in(run: Any) -> int:
    """Untimed calls until two consecutive ones agree within NOISY_CV (at most BURN_IN_CALLS)."""
    last = None
    for i in range(BURN_IN_CALLS):
        started = time.perf_counter()
        run()
        took = time.perf_counter() - started
        if last is not None and abs(took - last) <= NOISY_CV * max(took, last):
            return i + 1
        last = took
    return BURN_IN_CALLS


@contextlib.contextmanager
def _not_an_xdist_worker() -> Iterator[None]:
    """pytest-benchmark disables timing in a pytest-xdist worker, which it detects by the
    PYTEST_XDIST_WORKER variable; our own session is not one even when this process is (or
    was started by) one, e.g. under the project's parallel tests."""
    saved = os.environ.pop("PYTEST_XDIST_WORKER", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PYTEST_XDIST_WORKER"] = saved


def time_sweep(specs: list[PointSpec], options: TimingOptions, workdir: Path) -> SweepTiming:
    """Time the points (one variant and mode, increasing T) in one pytest-benchmark
    session; the first failing point ends the sweep and the later ones are "skipped"."""

    workdir.mkdir(parents=True, exist_ok=True)
    plan = SweepPlan(specs)
    json_path, ini = workdir / "benchmark.json", workdir / "pytest.ini"
    ini.write_text("[pytest]\n")
    json_path.unlink(missing_ok=True)
    module = Path(__file__).with_name("bench.py").resolve()  # run by path: bench imports this module
    args = [
        str(module),
        "-x",
        "-q",
        "--capture=no",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:faulthandler",
        "--import-mode=importlib",
        "-c",
        str(ini),
        "--rootdir",
        str(workdir),
        "--confcutdir",
        str(module.parent),
        f"--benchmark-json={json_path}",
        *options.args(),
    ]
    log = io.StringIO()
    with redirect_stdout(log), redirect_stderr(log), _not_an_xdist_worker():
        import pytest  # only a sweep needs it (validate and suites load this module)

        code = pytest.main(args, plugins=[plan])
    if plan.interrupted:
        raise KeyboardInterrupt
    data = json.loads(json_path.read_text()) if json_path.is_file() else {}
    done: dict[int, PointTiming] = {}
    for bench in data.get("benchmarks", []):
        stats = {k: v for k, v in bench["stats"].items() if k != "data"}  # per-round data dropped
        done[int(bench["params"]["T"])] = PointTiming("ok", stats, bench.get("extra_info", {}))
    points: dict[int, PointTiming] = {}
    failed: tuple[int, str] | None = None
    for T in plan.lengths():
        if failed is not None:
            points[T] = PointTiming("skipped", error=f"skipped after {failed[1]} at T={failed[0]}")
        elif T in done:
            points[T] = done[T]
        else:
            status, message = plan.failures.get(T) or (
                "error",
                f"pytest-benchmark session ended ({code!r}) without timing it: {log.getvalue()[-500:].strip()}",
            )
            points[T] = PointTiming(status, error=message)
            failed = (T, status)
    return SweepTiming(points, data.get("machine_info"), data.get("version"), log.getvalue())
