"""train precision on a CPU (issue 42): fp32 unless asked; bf16 autocast when asked; auto
follows a matmul probe (injected here, so the verdict does not depend on this machine)."""

from __future__ import annotations

import pytest
import torch

from attnbench.nn import precision
from attnbench.nn.precision import autocast_for, compute_dtype, resolve
from tests.helpers import tiny_train_suite

CPU = torch.device("cpu")


def _probe(speedup: float):
    return lambda: {"probe_bf16_speedup": speedup, "probe_fp32_gflops": 50.0, "probe_bf16_gflops": 50.0 * speedup}


def test_fp32_and_bf16_are_what_they_say_and_cuda_keeps_its_rule():
    assert resolve(CPU).dtype == resolve(CPU, "fp32").dtype == "fp32"
    bf16 = resolve(CPU, "bf16")
    with autocast_for(CPU, bf16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast_for(CPU, resolve(CPU, "fp32")):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert compute_dtype(CPU, bf16) == "bf16-autocast" and compute_dtype(CPU) == "fp32"
    assert resolve(torch.device("cuda"), "fp32").dtype == "bf16-autocast"


@pytest.mark.parametrize(("speedup", "dtype"), [(2.5, "bf16-autocast"), (1.05, "fp32"), (0.01, "fp32")])
def test_auto_uses_bf16_only_where_the_probe_measured_it_faster(monkeypatch, speedup, dtype):
    monkeypatch.setattr(precision, "bf16_probe", _probe(speedup))
    chosen = resolve(CPU, "auto")
    assert chosen.dtype == dtype
    record = chosen.record()
    assert record["precision"] == "auto" and record["probe_bf16_speedup"] == speedup
    assert f"{speedup:.2f}x" in record["precision_reason"]


@pytest.mark.parametrize(("fp32_s", "bf16_s", "dtype"), [(0.02, 0.005, "bf16-autocast"), (0.005, 0.02, "fp32")])
def test_auto_with_the_models_step_decides_by_the_step_not_the_matmul(monkeypatch, fp32_s, bf16_s, dtype):
    """The matmul probe says bf16 is 4x faster; the run's own step decides."""
    monkeypatch.setattr(precision, "bf16_probe", _probe(4.0))
    seen, clock = [], [0.0]
    monkeypatch.setattr(precision.time, "perf_counter", lambda: clock[0])  # a step takes what it says

    def step():
        amp = torch.is_autocast_enabled("cpu")
        seen.append(amp)
        clock[0] += bf16_s if amp else fp32_s

    chosen = resolve(CPU, "auto", step=step)
    assert chosen.dtype == dtype
    assert seen == [False, True] * 4  # a warm-up and 3 timed steps of each, interleaved
    record = chosen.record()
    assert record["probe_step_bf16_speedup"] == pytest.approx(fp32_s / bf16_s)
    assert "bf16 training step" in record["precision_reason"] and record["probe_bf16_speedup"] == 4.0


def test_an_unknown_precision_names_the_choices():
    with pytest.raises(ValueError, match=r"precision must be one of \['fp32', 'bf16', 'auto'\], got 'fp16'"):
        resolve(CPU, "fp16")


def test_the_probe_reports_the_cpu_it_ran_on():
    features = precision.cpu_features()
    assert set(features) == {"cpu", "cpu_capability", "cpu_flags"}
    assert set(features["cpu_flags"]) <= set(precision.CPU_FLAGS)


SUITE = tiny_train_suite("precision-check", ", precision: bf16")


@pytest.mark.parametrize("setting", ["bf16", "auto"])
def test_train_precision_is_recorded_with_the_run_and_the_gate_checks_bf16(tmp_path, setting):
    import io

    from attnbench.plan.suite import load_suite
    from attnbench.registry.loader import load_registry
    from attnbench.run.runner import run_suite
    from attnbench.store.database import Store
    from tests.helpers import write_suite

    suite = write_suite(tmp_path / "s.yaml", SUITE.replace("precision: bf16", f"precision: {setting}"))
    with Store(tmp_path / "s.sqlite") as store:
        run_suite(load_suite(suite), store, load_registry(), device="cpu", out=io.StringIO())
        [run] = store.runs(suite="precision-check")
        gate = store.checks(variant="softmax")
    summary = run["summary"]
    assert run["config"]["train"]["precision"] == setting == summary["precision"]
    if setting == "bf16":
        assert summary["dtype"] == "bf16-autocast" and summary["precision_reason"] == "bf16 asked"
    else:  # auto timed this run's own step in both and chose by it, whichever this CPU favours
        speedup = summary["probe_step_fp32_s"] / summary["probe_step_bf16_s"]
        assert summary["probe_step_bf16_speedup"] == pytest.approx(speedup)
        assert summary["dtype"] == ("bf16-autocast" if speedup >= precision.AUTO_MIN_SPEEDUP else "fp32")
        assert f"bf16 training step {speedup:.2f}x fp32" in summary["precision_reason"]
    # the gate checked what the run may train in: bf16 autocast, with bf16's tolerances
    amp = next(c for c in gate if c["check_name"] == "autocast_at_scale")
    assert amp["status"] == "pass" and "bf16 x16: leak" in amp["detail"] and "fp16" not in amp["detail"]
    finite = next(c for c in gate if c["check_name"] == "finite_long_inputs")
    assert "bf16 autocast: max|y|" in finite["detail"]


def test_an_fp32_run_on_a_cpu_skips_the_autocast_checks_and_keys_its_verdict_apart(registry):
    from attnbench.gate.checks import run_checks
    from attnbench.gate.verdicts import gate_key_inputs
    from attnbench.store.provenance import content_key

    softmax = registry.get("softmax")
    [amp] = [r for r in run_checks(softmax, long_T=64) if r.check == "autocast_at_scale"]
    assert amp.status == "skip" and "fp32 only on cpu" in amp.detail
    fp32, bf16 = (content_key(gate_key_inputs(softmax, "cpu", autocast=a)) for a in ((), ("bf16",)))
    assert fp32 != bf16  # a verdict for fp32 training is never reused for a bf16 run
    bad = run_checks(softmax, autocast=("fp8",))  # a setup error: every check says so, none runs
    assert {r.status for r in bad} == {"error"}
    assert "autocast dtypes must be among ['bf16', 'fp16'], got ['fp8']" in bad[0].detail
