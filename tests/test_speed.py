"""Speed experiments: rows in the documented format for every mode, failures stored as
data (out of memory, time-out) with longer lengths skipped, fits and crossovers on
synthetic curves, content-keyed reuse across a variant's code change, `attnbench bench`.

Kept small: a 1-layer d_model 32 model, lengths 16 and 32; each point still starts one
fresh process (the isolated memory measurement), which dominates the time.
"""

from __future__ import annotations

import importlib
import io
import math
import sys
import time

import pytest
import torch
from torch import nn

from attnbench import Variant, hookimpl
from attnbench.errors import SuiteError
from attnbench.experiments.registry import expand_suite
from attnbench.plan.speed_spec import SpeedExperiment, SpeedSpec
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.run.runner import run_suite
from attnbench.stats.slopes import crossover, loglog_slope, t_quantile_975
from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, write_suite

OOM_ABOVE = 16


class OOMAbove(nn.Module):
    """A token-wise projection whose forward raises OutOfMemoryError above T = 16."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(1) > OOM_ABOVE:
            raise torch.OutOfMemoryError(f"simulated: T={x.size(1)} > {OOM_ABOVE}")
        return self.proj(x)  # (B, T, D)


class Sleeper(OOMAbove):
    """Blocks far past any time limit: the isolated run must be killed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return self.proj(x)  # (B, T, D)


class Raises(OOMAbove):
    """Fails with an ordinary exception at every length."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("deliberate failure")


@hookimpl
def attnbench_register_variants(register) -> None:
    register(Variant(name="oom-above-16", build_mixer=OOMAbove, description="raises OOM above T=16"))
    register(Variant(name="sleeper", build_mixer=Sleeper, description="sleeps past the time limit"))
    register(Variant(name="raises", build_mixer=Raises, description="raises ValueError"))


FAILURES = """
    version: 1
    name: speed-failures
    device: cpu
    allow_failed_checks: true  # these variants fail on purpose; the gate must not stop them
    check_time_limit_s: 5
    defaults:
      model: {d_model: 32, n_layer: 1, n_head: 2}
    experiments:
      - name: oom
        kind: speed
        variants: [oom-above-16]
        speed: {lengths: [16, 32, 64], modes: [forward, train_step, decode], min_rounds: 2, max_time: 0.05, threads: 1}
      - name: hang
        kind: speed
        variants: [sleeper, raises]
        speed: {lengths: [16, 32], modes: [forward], time_limit_s: 8, threads: 1}
"""


def _rows(store: Store, run: dict, name: str) -> dict[tuple[str, int], dict]:
    return {(r["tags"]["mode"], r["tags"]["T"]): r for r in store.results(run["id"]) if r["name"] == name}


def test_oom_and_timeout_are_stored_and_longer_lengths_skipped(tmp_path):
    registry = load_registry(get_plugin_manager([("speedtest", sys.modules[__name__])], entry_points=False))
    suite = load_suite(write_suite(tmp_path / "failures.yaml", FAILURES))
    with Store(tmp_path / "s.sqlite") as store:
        report = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert report.ran == 3 and report.not_done == []  # failed points do not fail the cell
        runs = {r["variant"]: r for r in store.runs(kind="speed")}
        oom = runs["oom-above-16"]
        times, mems = _rows(store, oom, "time_s"), _rows(store, oom, "peak_memory_bytes")
        for mode in ("forward", "train_step"):
            ok = times[(mode, 16)]
            assert ok["tags"]["status"] == "ok" and ok["value"] > 0 and ok["unit"] == "s"
            assert {"stddev_s", "iqr_s", "rounds", "tokens_per_s", "dtype", "backend", "fallback", "path"} <= set(
                ok["tags"]
            )
            assert mems[(mode, 16)]["value"] >= 0 and mems[(mode, 16)]["tags"]["memory_method"].startswith("cpu-")
            for rows in (times, mems):
                assert rows[(mode, 32)]["tags"]["status"] == "oom" and rows[(mode, 32)]["value"] is None
                assert "simulated: T=32" in rows[(mode, 32)]["tags"]["error"]
                assert rows[(mode, 64)]["tags"]["status"] == "skipped" and rows[(mode, 64)]["value"] is None
                assert "oom at T=32" in rows[(mode, 64)]["tags"]["error"]
        # decode: the variant declares none, so every context is skipped, with the reason
        assert all(times[("decode", T)]["tags"]["status"] == "skipped" for T in (16, 32, 64))
        assert "decode: none" in times[("decode", 16)]["tags"]["error"]
        assert oom["summary"]["first_failure"]["forward"]["status"] == "oom"
        hang = runs["sleeper"]
        times = _rows(store, hang, "time_s")
        assert times[("forward", 16)]["tags"]["status"] == "timeout" and times[("forward", 16)]["value"] is None
        assert times[("forward", 32)]["tags"]["status"] == "skipped"
        assert hang["finished_at"] - hang["started_at"] < 60  # killed at the limit, not after an hour
        times = _rows(store, runs["raises"], "time_s")
        assert times[("forward", 16)]["tags"]["status"] == "error"
        assert "deliberate failure" in times[("forward", 16)]["tags"]["error"]
        assert times[("forward", 32)]["tags"]["status"] == "skipped"
        fits = {r["variant"]: r for r in store.runs(kind="speed_fit")}
        assert set(fits) == {"oom-above-16", "sleeper", "raises"}
        slope = next(r for r in store.results(fits["sleeper"]["id"]) if r["name"] == "slope")
        assert slope["value"] is None and slope["tags"]["n_points"] == 0
        cross = [r for r in store.results(fits["sleeper"]["id"]) if r["name"] == "crossover_T"]
        assert cross and all(r["tags"]["status"] == "no-baseline" for r in cross)  # no softmax here


@pytest.fixture(scope="module")
def bench_store(tmp_path_factory):
    """`attnbench bench` over softmax and toy-ema, forward and decode, T = 16 and 32
    (train_step rows are checked in the failures test)."""
    path = tmp_path_factory.mktemp("bench") / "bench.sqlite"
    args = (
        "bench",
        "--variants",
        "softmax,toy-ema",
        "--lengths",
        "16,32",
        "--modes",
        "forward,decode",
        "--d-model",
        "32",
        "--n-layer",
        "1",
        "--n-head",
        "2",
        "--min-rounds",
        "2",
        "--max-time",
        "0.05",
        "--threads",
        "1",
        "--store",
        str(path),
    )
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    return path, args, first.stdout


def test_bench_cli_prints_table_and_rows_have_the_documented_format(bench_store):
    path, _, stdout = bench_store
    assert "median time per call" in stdout and "peak memory added by one call" in stdout
    assert "crossover vs softmax" in stdout and "2 cells, 2 run, 0 already stored" in stdout
    with Store(path) as store:
        runs = {r["variant"]: r for r in store.runs(kind="speed")}
        assert set(runs) == {"softmax", "toy-ema"}
        summary = runs["softmax"]["summary"]
        assert summary["machine_info"]["cpu"] and summary["benchmark"]["tool"] == "pytest-benchmark"
        for variant, run in runs.items():
            results = store.results(run["id"])
            assert len(results) == 2 * 2 * 2  # modes x lengths x (time, memory)
            for r in results:
                tags = r["tags"]
                assert tags["status"] == "ok", (variant, tags)
                assert {"mode", "T", "dtype", "backend", "fallback", "path"} <= set(tags)
                assert tags["dtype"] == "fp32" and isinstance(tags["fallback"], bool)
                if r["name"] == "time_s":
                    assert r["unit"] == "s" and r["value"] > 0
                    assert {"stddev_s", "iqr_s", "rounds", "tokens_per_s"} <= set(tags) and tags["rounds"] >= 2
                else:
                    assert r["name"] == "peak_memory_bytes" and r["unit"] == "B" and r["value"] >= 0
                    assert tags["memory_method"].startswith("cpu-")
                if tags["mode"] == "decode":
                    assert tags["context"] == tags["T"] and tags["state_bytes"] > 0
        # softmax runs fused SDPA and the profiler names its kernel; toy-ema uses no SDPA
        soft = store.results(runs["softmax"]["id"])
        assert all(r["tags"]["backend"] in ("flash-cpu", "math") for r in soft if r["tags"]["mode"] != "decode")
        assert all(r["tags"]["backend"] == "n/a" for r in store.results(runs["toy-ema"]["id"]))
        fits = {r["variant"]: store.results(r["id"]) for r in store.runs(kind="speed_fit")}
        slopes = [r for r in fits["toy-ema"] if r["name"] == "slope"]
        assert {(r["tags"]["mode"], r["tags"]["quantity"]) for r in slopes} == {
            (m, q) for m in ("forward", "decode") for q in ("time", "memory")
        }
        # two lengths: no slope is stored (a line through 2 points has no interval), and it says why
        assert all(r["value"] is None and "too few to fit" in r["tags"]["error"] for r in slopes)
        assert all(r["tags"]["T_min"] == 16 for r in slopes if r["tags"]["n_points"] == 2)
        cross = [r for r in fits["toy-ema"] if r["name"] == "crossover_T"]
        assert len(cross) == 2 and all(r["tags"]["status"] in ("found", "never", "always") for r in cross)
        assert all(r["tags"]["against"] == "softmax" and r["tags"]["device"].startswith("cpu") for r in cross)
        assert not [r for r in fits["softmax"] if r["name"] == "crossover_T"]  # the baseline itself


def test_bench_rerun_reuses_everything(bench_store):
    path, args, _ = bench_store
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert "2 cells, 0 run, 2 already stored" in again.stdout
    with Store(path) as store:
        assert len(store.runs(kind="speed")) == 2 and len(store.runs(kind="speed_fit")) == 2


PLUGIN_SRC = """
from torch import nn
from harness import Variant, hookimpl
from attnbench.experiments.registry import expand_suite
from attnbench.errors import SuiteError


class TmpMixer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x):
        return self.proj(x)  # {version}


@hookimpl
def attnbench_register_variants(register):
    register(Variant(name="tmp-speed", build_mixer=TmpMixer))
"""

TMP_SUITE = """
    version: 1
    name: speed-resume
    device: cpu
    experiments:
      - name: tiny
        kind: speed
        variants: [tmp-speed]
        models: [{d_model: 32, n_layer: 1, n_head: 2}]
        speed: {lengths: [16], modes: [forward], min_rounds: 2, max_time: 0.05, threads: 1}
"""


def test_rerun_reuses_unchanged_and_recomputes_after_variant_code_change(tmp_path, monkeypatch):
    name = f"attnbench_tmp_speed_{tmp_path.name.replace('-', '_')}"
    source = tmp_path / f"{name}.py"
    source.write_text(PLUGIN_SRC.format(version="v1"))
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = load_suite(write_suite(tmp_path / "suite.yaml", TMP_SUITE))

    def run() -> tuple[int, int]:
        module = importlib.reload(importlib.import_module(name))
        registry = load_registry(get_plugin_manager([(name, module)], entry_points=False))
        report = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        return report.ran, report.skipped

    with Store(tmp_path / "s.sqlite") as store:
        assert run() == (1, 0)
        assert run() == (0, 1)  # nothing changed: everything reused, fits not duplicated
        assert len(store.runs(kind="speed")) == 1 and len(store.runs(kind="speed_fit")) == 1
        source.write_text(PLUGIN_SRC.format(version="v2"))  # a code change of the variant
        assert run() == (1, 0)
        keys = [r["cell_key"] for r in store.runs(kind="speed")]
        assert len(set(keys)) == 2
        fits = store.runs(kind="speed_fit")
        assert len(fits) == 2 and fits[1]["config"]["key_inputs"]["cells"] == [keys[1]]
    sys.modules.pop(name, None)


def test_loglog_slope_recovers_a_known_power_law_with_its_interval():
    Ts = [256, 512, 1024, 2048, 4096, 8192]
    noise = [1.03, 0.98, 1.01, 0.97, 1.02, 1.0]
    ys = [2e-9 * T**2 * n for T, n in zip(Ts, noise, strict=True)]  # quadratic with a few % noise
    fit = loglog_slope(Ts, ys)
    assert fit is not None and fit.ci95 is not None and fit.stderr is not None
    assert abs(fit.slope - 2.0) < 0.03 and fit.n_points == 6 and (fit.T_min, fit.T_max) == (256, 8192)
    assert fit.ci95[0] < 2.0 < fit.ci95[1] and fit.stderr > 0
    # the interval is slope +- t(0.975, n-2) * stderr
    assert math.isclose(fit.ci95[1] - fit.slope, t_quantile_975(4) * fit.stderr)
    overhead = [1e-5 + 1e-7 * T for T in Ts]  # linear, with a constant that matters at short T
    linear_tail, whole = loglog_slope(Ts, overhead, T_from=2048), loglog_slope(Ts, overhead)
    assert linear_tail is not None and whole is not None
    assert linear_tail.n_points == 3 and 0.9 < linear_tail.slope < 1.0
    assert whole.slope < linear_tail.slope
    exact = loglog_slope([1024, 2048], [1.0, 2.0])
    assert exact is not None
    assert math.isclose(exact.slope, 1.0) and exact.stderr is None and exact.ci95 is None
    assert loglog_slope([1024], [1.0]) is None and loglog_slope([1024, 2048], [0.0, 1.0]) is None


def test_crossover_on_synthetic_curves():
    Ts = [256, 512, 1024, 2048, 4096]
    softmax = {T: 1e-8 * T**2 for T in Ts}  # quadratic
    linear = {T: 1e-5 * T for T in Ts}  # linear: equal at T = 1000
    cx = crossover(linear, softmax)
    assert cx.status == "found" and cx.T == 1024 and cx.T_interp is not None and abs(cx.T_interp - 1000) < 1
    assert crossover({T: 0.5 * v for T, v in softmax.items()}, softmax).status == "always"
    assert crossover({T: 2 * v for T, v in softmax.items()}, softmax).status == "never"
    # the baseline running out of memory at 4096 counts as the variant being faster there
    slow_linear = {T: 1e-4 * T for T in Ts}  # equal at 10000: never faster while both run
    late = crossover(slow_linear, {**softmax, 4096: None})
    assert (late.status, late.T, late.T_interp) == ("found", 4096, None)
    assert crossover({**linear, 4096: None}, softmax).status == "never"  # the variant failed last
    assert crossover(linear, {}).status == "no-baseline"


def test_speed_spec_lengths_and_validation():
    spec = SpeedSpec(T_min=256, T_max=2048, decode_contexts=[1024, 128], decode_tokens=4)
    assert spec.sweep("forward") == [256, 512, 1024, 2048] and spec.sweep("decode") == [128, 1024]
    assert spec.context_needed() == 2048
    assert SpeedSpec(lengths=[64, 16, 64], modes=["decode"]).context_needed() == 64 + 8
    for bad in (
        {"T_min": 512, "T_max": 256},
        {"lengths": [0, 16]},
        {"modes": []},
        {"modes": ["forward", "forward"]},
        {"modes": ["backward"]},
    ):
        with pytest.raises(ValueError):
            SpeedSpec.model_validate(bad)


def test_suite_errors_name_the_speed_key(tmp_path):
    bad = write_suite(
        tmp_path / "bad.yaml",
        """
        version: 1
        name: bad
        experiments:
          - name: s
            kind: speed
            speed: {T_min: 256, T_max: 16384, modez: [forward]}
    """,
    )
    with pytest.raises(SuiteError, match=r"bad.yaml:6: .*modez"):
        load_suite(bad)


def test_shipped_speed_suite_validates():
    suite = load_suite(REPO / "suites" / "speed.yaml")
    exp = suite.experiments[0]
    assert isinstance(exp, SpeedExperiment)
    spec = exp.speed
    assert spec.sweep("train_step")[-1] == 16384 and suite.experiments[0].variants == "all"
    assert expand_suite(suite, load_registry())  # every registered variant, context covers 16384


def test_report_path_column_shows_what_the_mixer_says_it_ran(tmp_path):
    """The points table names the mixer's describe_path() (kernel, chunk size), not only the
    attention backend the profiler saw."""
    store = tmp_path / "s.sqlite"
    result = run_cli(
        "bench",
        "--variants",
        "linear",
        "--lengths",
        "16",
        "--modes",
        "forward",
        "--d-model",
        "32",
        "--n-layer",
        "1",
        "--n-head",
        "2",
        "--min-rounds",
        "2",
        "--max-time",
        "0.05",
        "--threads",
        "1",
        "--store",
        str(store),
    )
    assert result.returncode == 0, result.stderr
    report = run_cli("report", "--store", str(store), "--out", str(tmp_path / "rep"))
    assert report.returncode == 0, report.stderr
    row = next(
        line.replace("\\_", "_")
        for line in (tmp_path / "rep" / "report.md").read_text().splitlines()
        if line.startswith("| linear") and "| forward |" in line
    )
    assert "| kernel=chunked.linear_attention, chunk_size=64, " in row and "; backend=n/a |" in row, row
