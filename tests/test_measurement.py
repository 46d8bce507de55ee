"""Measurement hygiene of speed points: a noisy timing (real spread, or measured under load)
is re-measured a bounded number of times, then stored and reported as noisy; fits on
noisy points or with a wide interval are flagged; the report's Problems list every flag."""

from __future__ import annotations

import io
import sys
import time

import torch
from torch import nn

from attnbench import Variant, hookimpl
from attnbench.experiments.speed import timing
from attnbench.experiments.speed.fits import fit_flags
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests.helpers import write_suite


class Jittery(nn.Module):
    """Causal (position-wise) and correct, but every other call sleeps 30 ms: a timing whose
    rounds spread far beyond 20%."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls % 2 and not torch.is_grad_enabled():
            time.sleep(0.03)
        return self.proj(x)  # (B, T, D)


class Steady(nn.Module):
    """Position-wise and quick: its timings spread only as the machine makes them."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)  # (B, T, D)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(Variant(name="jittery", build_mixer=Jittery, description="sleeps on every other call"))
    register(Variant(name="steady", build_mixer=Steady, description="a position-wise projection"))


SUITE = """
    version: 1
    name: hygiene
    device: cpu
    allow_failed_checks: true
    check_time_limit_s: 5
    defaults:
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
    experiments:
      - name: speed
        kind: speed
        variants: [{variant}]
        speed: {{lengths: [16, 32], modes: [forward], min_rounds: 6, max_time: 0.05, warmup: 0,
                 max_remeasure: 1, threads: 1}}
"""


def _run(tmp_path, variant: str):
    registry = load_registry(get_plugin_manager([("hygiene", sys.modules[__name__])], entry_points=False))
    suite = load_suite(write_suite(tmp_path / "suite.yaml", SUITE.format(variant=variant)))
    with Store(tmp_path / "s.sqlite") as store:
        run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        run = store.runs(kind="speed")[0]
        times = [r for r in store.results(run["id"]) if r["name"] == "time_s"]
        fit = store.runs(kind="speed_fit")[0]
        slope = next(r for r in store.results(fit["id"]) if r["name"] == "slope" and r["tags"]["quantity"] == "time")
    return times, slope, build_report(load_store(tmp_path / "s.sqlite", "hygiene"))


IDLE = {"load1": 0.1, "cpus": 2, "runnable": 1}  # the load reading each test decides on, not the machine's


def test_a_noisy_timing_is_remeasured_then_flagged_in_store_and_report(tmp_path, monkeypatch):
    # Noisy by its own spread (a 30 ms sleep on every other call), on an idle machine: the
    # reading is injected, so a busy machine running the test does not make it "under load".
    monkeypatch.setattr(timing, "machine_load", lambda: IDLE)
    times, slope, report = _run(tmp_path, "jittery")
    assert len(times) == 2
    for row in times:
        tags = row["tags"]
        assert tags["status"] == "ok" and row["value"] > 0  # stored, not dropped
        assert tags["noisy"] and tags["attempts"] == 2 and tags["cv"] > 0.2
        assert "coefficient of variation" in tags["noisy_reason"]
        assert {"load1", "cpus"} <= set(tags["load_before"]) and "load1" in tags["load_after"]
    assert any("rests on noisy point" in f for f in slope["tags"]["flags"])
    kinds = {(p.kind, p.where.split()[-1]) for p in report.notes}  # a limit of the budget: a note, not a fault
    assert {("noisy speed point", f"T={T}") for T in (16, 32)} <= kinds
    assert any(p.kind == "flagged fit" and p.variant == "jittery" for p in report.notes)
    assert not any(p.kind in ("noisy speed point", "flagged fit") for p in report.problems)


def test_a_point_measured_under_load_is_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "machine_load", lambda: {"load1": 40.0, "cpus": 2, "runnable": 30})
    times, _, report = _run(tmp_path, "steady")
    assert all(r["tags"]["noisy"] and "under load" in r["tags"]["noisy_reason"] for r in times)
    assert all(r["tags"]["attempts"] == 2 for r in times)  # re-measured once, then flagged
    assert sum(p.kind == "speed point under load" for p in report.problems) == 2  # a real fault: a problem


def test_wide_fit_intervals_are_flagged_and_tight_clean_ones_are_not():
    assert fit_flags({"T_min": 16, "T_max": 64, "ci95": [0.9, 1.1]}, set()) == []
    assert "wider than" in fit_flags({"T_min": 16, "T_max": 64, "ci95": [-2.13, 1.31]}, set())[0]
    assert "T=[32]" in fit_flags({"T_min": 16, "T_max": 64, "ci95": [0.9, 1.1]}, {32, 128})[0]


def _exit_at_setup(code: int):  # a child that dies before reporting, as a crash at import would
    import os

    os._exit(code)


def _killed_at_setup():  # a child killed by SIGKILL, as the OOM killer does
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def test_a_child_that_dies_is_out_of_memory_only_when_killed():
    """A memory child that exits with an error is an error, not out of memory; only SIGKILL
    (the OOM killer's signal) reads as oom."""
    from attnbench.experiments.speed.memory import measure_peak

    crashed = measure_peak("tests.test_measurement:_exit_at_setup", timeout=60, code=1)
    assert crashed.status == "error" and "exit code 1" in crashed.error
    killed = measure_peak("tests.test_measurement:_killed_at_setup", timeout=60)
    assert killed.status == "killed" and "SIGKILL" in killed.error  # issue 66: not assumed out of memory


def _allocate(mb: int, device: str = "cpu"):  # setup: nothing yet; the call fills ``mb`` MiB of fresh memory
    def call() -> None:
        x = torch.ones(mb * 2**18)  # float32: 4 bytes per element
        assert float(x[-1]) == 1.0

    return call


def test_a_cpu_peak_is_the_data_the_call_added_in_a_forked_child(monkeypatch):
    """On Linux a CPU point's fresh process comes from the fork server (milliseconds, not an
    interpreter and torch start) and maps its libraries' pages before setup, so the peak of a
    call that fills 64 MiB is 64 MiB and little more; a spawned child, where there is no fork
    server, measures the same allocation."""
    import multiprocessing as mp

    from attnbench.experiments.speed.memory import measure_peak

    forked = measure_peak("tests.test_measurement:_allocate", timeout=60, device="cpu", mb=64)
    assert forked.status == "ok" and forked.process == "forkserver" and forked.bytes is not None
    assert "file pages mapped first" in forked.method
    assert 63 * 2**20 <= forked.bytes < 66 * 2**20
    monkeypatch.setattr(mp, "get_all_start_methods", lambda: ["spawn"])
    spawned = measure_peak("tests.test_measurement:_allocate", timeout=60, device="cpu", mb=64)
    assert spawned.status == "ok" and spawned.process == "spawn" and spawned.bytes is not None
    assert 63 * 2**20 <= spawned.bytes < 72 * 2**20
