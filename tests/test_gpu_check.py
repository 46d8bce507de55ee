"""scripts/gpu_check.sh, the one-command GPU check (issue 41): its CPU dry run writes one folder
(store, suite, logs, per-step records, report, summary.json and summary.md) whose summary says,
step by step, what ran and what was left out because it needs CUDA. The time boxes and the
skipping rules are tested with a stand-in child process (no clock, no machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from attnbench.gate.scale import AUTOCAST_TOL
from benchmarks.gpu_check import driver
from benchmarks.gpu_check.figures import amp_by_dtype
from benchmarks.gpu_check.layout import Layout
from benchmarks.gpu_check.plan import DRY, GPU, suite
from benchmarks.gpu_check.summary import targets
from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"
STEPS = ["env", "check", "smoke", "gpt2", "speed", "report"]  # the default run: all but the opt-in fla step
LISTED = ["env", "check", "smoke", "gpt2", "speed", "fla", "report"]  # the summary lists every step
DRY_RUN_CPU_S = 75  # the dry run's cost guard (about 37 CPU-seconds measured on a busy 2-core machine)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict[str, Any]]:
    out = tmp_path_factory.mktemp("gpu-check") / "out"
    # A budget above the dry run's 90 s scales every time box with it: a busy CI machine must not cut a step short.
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--dry-run", "--budget", "300"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=600,
    )
    assert (out / "summary.json").exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, proc, json.loads((out / "summary.json").read_text())


def test_dry_run_writes_one_folder_and_ends_with_the_summary(dry_run):
    out, proc, summary = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for path in ("store.sqlite", "suite.yaml", "summary.json", "summary.md", "report/report.md", "report/index.html"):
        assert (out / path).is_file(), path
    assert sorted(p.stem for p in (out / "logs").glob("*.log")) == sorted(STEPS)
    assert sorted(p.stem for p in (out / "steps").glob("*.json")) == sorted(STEPS)
    md = (out / "summary.md").read_text()
    assert proc.stdout.rstrip().endswith(md.rstrip())  # a device call's output tail is the summary
    assert summary["layout"]["store"] == "store.sqlite" and summary["layout"]["report"] == "report/"


def test_summary_lists_each_step_in_order_and_what_needs_cuda(dry_run):
    _, _, summary = dry_run
    assert (summary["mode"], summary["device"]) == ("dry-run", "cpu")
    assert [st["name"] for st in summary["steps"]] == LISTED
    status = {st["name"]: st["status"] for st in summary["steps"]}
    assert status == dict.fromkeys(STEPS, "ok") | {"fla": "not run"}, summary["steps"]
    for st in summary["steps"]:
        if st["cuda_parts"]:  # every step with a CUDA-only part says it was left out, and why
            assert "CUDA" in st["left_out"], st
    assert summary["variants"] == ["linear", "softmax"] and "2 of" in summary["variants_note"]
    assert sum(st.get("cpu_s", 0) for st in summary["steps"]) < DRY_RUN_CPU_S
    assert all(t["met"] is None and t["note"] == "dry run: not a measurement" for t in summary["targets"])


def test_figures_of_each_step(dry_run):
    _, _, summary = dry_run
    f = summary["figures"]
    assert f["env"]["torch_meets_floor"] and f["env"]["cuda"] == {"available": False}
    for v in ("linear", "softmax"):
        gate = f["check"]["variants"][v]
        assert gate["fp32"]["status"] == "pass"
        assert gate["bf16-autocast"]["status"] == "skip" and "fp32 only on cpu" in gate["bf16-autocast"]["reason"]
        assert gate["bf16-autocast"]["tolerance"]["leak"] > f["check"]["fp32_tolerances"]["leak_at_scale"]
    models = f["smoke"]["models"]
    assert set(models) == {"linear", "softmax", "linear + softmax"}  # the hybrid beside the variants
    assert all(m["finite"] and m["decreasing"] and m["steps"] == 20 for m in models.values())
    gpt2 = f["gpt2"]
    assert gpt2["status"] == "done" and gpt2["tokens_per_s"] > 0 and 0 < gpt2["mfu"] < 1
    assert (gpt2["dtype"], gpt2["compile"]) == ("fp32", False)
    curves = f["speed"]["curves"]
    assert set(curves) == {"softmax", "linear"}
    assert sorted(int(T) for T in curves["softmax"]["points"]) == [32, 64]
    assert all(p["backend"] and p["time_status"] == "ok" for p in curves["softmax"]["points"].values())
    assert curves["linear"]["crossover"]["status"] in ("found", "always", "never")
    assert any(name.endswith("report.md") for name in f["report"]["files"])


def test_the_gpu_suite_runs_every_variant_a_hybrid_gpt2_small_and_the_fla_kernels():
    variants = ["additive", "gla", "gated_deltanet", "linear", "mamba2", "softmax"]
    experiments = {e["name"]: e for e in suite(GPU, variants)["experiments"]}
    assert experiments["smoke"]["train"]["budget"] == {"steps": 200}
    assert experiments["smoke"]["models"][1]["layers"] == {"pattern": ["gated_deltanet", "softmax"]}
    gpt2 = experiments["gpt2"]
    assert gpt2["models"] == [{"d_model": 768, "n_layer": 12, "n_head": 12}] and gpt2["train"]["compile"]
    assert gpt2["train"]["seq_len"] == 1024 and gpt2["data"]["bpe_vocab_size"] == 50257
    assert experiments["speed"]["speed"]["lengths"][0] == 1024 and experiments["speed"]["speed"]["lengths"][-1] == 32768
    assert experiments["speed-fla"]["variant_options"]["linear"] == {"kernel": "fla"}
    # each speed experiment has its own softmax baseline: the fla step runs in a device call of its own
    assert experiments["speed-fla"]["variants"][:2] == ["softmax", "linear"]
    assert "softmax" in experiments["speed"]["variants"]
    # fla's first use compiles and autotunes (82 s for linear's bf16 forward + backward on an H100): the
    # gate (fp32, bf16, fp16) and the first speed point each get time for it
    assert experiments["speed-fla"]["speed"]["time_limit_s"] == GPU.fla_time_limit_s >= 4 * 82
    assert suite(GPU, variants)["check_time_limit_s"] == GPU.fla_time_limit_s
    assert experiments["speed"]["speed"]["time_limit_s"] == 60
    assert "speed-fla" not in {e["name"] for e in suite(DRY, variants)["experiments"]}
    assert sum(st.box_s for st in GPU.steps) >= GPU.budget_s >= sum(st.floor_s for st in GPU.steps)


def _fake_child(outcomes: dict[str, str], calls: list[list[str]]):
    """Stands in for the child process: "timeout", or writes the step's record with that status."""

    def run(args: list[str], log: Path, box_s: float) -> str:
        calls.append(args)
        step, out = args[0], Path(args[1])
        outcome = outcomes.get(step, "ok")
        if outcome == "timeout" and "--figures-only" not in args:
            return "timeout"
        figures: dict[str, Any] = {"run_variants": ["softmax"]} if step == "env" else {"partial": True}
        record = {"status": outcome if outcome != "timeout" else "failed", "reason": None, "figures": figures}
        Layout(out).step_json(step).write_text(json.dumps(record))
        return "done"

    return run


def test_a_step_over_its_box_is_stopped_and_what_it_stored_is_read_back(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(driver, "_run_child", _fake_child({"smoke": "timeout"}, calls))
    assert driver.main([str(tmp_path), "--dry-run"]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    status = {st["name"]: st["status"] for st in summary["steps"]}
    assert status == {"env": "ok", "check": "ok", "smoke": "timeout", "gpt2": "ok", "speed": "ok", "fla": "not run"} | {
        "report": "ok"
    }
    assert summary["figures"]["smoke"] == {"partial": True}
    assert ["smoke", str(tmp_path), "--dry-run", "--figures-only"] in calls


def test_a_failed_environment_skips_every_later_step_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "_run_child", _fake_child({"env": "failed"}, []))
    assert driver.main([str(tmp_path), "--dry-run"]) == 1
    steps = json.loads((tmp_path / "summary.json").read_text())["steps"]
    assert [st["status"] for st in steps] == ["failed"] + ["skipped"] * 4 + ["not run", "skipped"]
    assert all(st["reason"].startswith("environment step failed") for st in steps[1:] if st["name"] != "fla")


def test_the_fla_step_runs_only_when_named_and_says_why_it_cannot_run_without_cuda(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(driver, "_run_child", _fake_child({}, calls))
    assert driver.main([str(tmp_path), "--dry-run", "--steps", "env,fla,report"]) == 1
    steps = {st["name"]: st for st in json.loads((tmp_path / "summary.json").read_text())["steps"]}
    assert steps["fla"]["status"] == "skipped" and "needs CUDA" in steps["fla"]["reason"]
    assert [c[0] for c in calls] == ["env", "report"] and steps["speed"]["status"] == "not run"


def test_time_boxes_keep_the_later_steps_floors_and_scale_with_the_budget():
    check, later = DRY.steps[1], list(DRY.steps[2:])
    floors = sum(st.floor_s for st in later)
    assert driver.box_s(check, later, left_s=1000, scale=1) == check.box_s
    assert driver.box_s(check, later, left_s=floors + 7, scale=1) == 7
    assert driver.box_s(check, later, left_s=1000, scale=2) == 2 * check.box_s


def test_targets_are_judged_on_a_gpu_run():
    steps = [
        {"name": "gpt2", "figures": {"mfu": 0.43}},
        {
            "name": "speed",
            "figures": {
                "curves": {
                    "softmax": {},
                    "linear": {"faster_than_softmax_at_16384": False},
                    "linear (fla)": {"faster_than_softmax_at_16384": True},
                }
            },
        },
        {
            "name": "check",
            "figures": {
                "variants": {"softmax": {k: {"status": "pass"} for k in ("fp32", "bf16-autocast", "fp16-autocast")}}
            },
        },
    ]
    mfu, fla, gate = targets(steps, dry_run=False)
    assert (mfu["met"], fla["met"], gate["met"]) == (True, True, True)
    assert fla["value"] == {"linear": False, "linear (fla)": True}
    # the fla step's curves (read later from the same store) count too, and a slower fla kernel fails it
    steps.append({"name": "fla", "figures": {"curves": {"linear (fla)": {"faster_than_softmax_at_16384": False}}}})
    _, fla, _ = targets(steps, dry_run=False)
    assert fla["met"] is False and fla["value"] == {"linear": False, "linear (fla)": False}


def test_autocast_figures_are_read_per_dtype_from_the_gate_detail():
    detail = (
        "bf16 x1: leak 1.0e-03 (tol 0.02), vs float64 4.0e-03 (tol 0.1); "
        "bf16 x16: leak 3.0e-02 (tol 0.02), vs float64 5.0e-03 (tol none above x4: bf16 rounding) FAIL at t=40; "
        "fp16 x1: leak 2.0e-04 (tol 0.002), vs float64 1.0e-03 (tol 0.02); weights x1/4/16"
    )
    amp = amp_by_dtype({"status": "fail", "detail": detail})
    assert amp["bf16-autocast"] | {"tolerance": None} == {
        "status": "fail",
        "worst_leak": 3.0e-2,
        "worst_vs_float64": 4.0e-3,  # judged: weights up to x4
        "vs_float64_above_judged": 5.0e-3,  # x16: reported only
        "tolerance": None,
    }
    assert (amp["fp16-autocast"]["status"], amp["fp16-autocast"]["worst_leak"]) == ("pass", 2.0e-4)
    assert amp["bf16-autocast"]["tolerance"]["leak"] == AUTOCAST_TOL["bf16"][0]
