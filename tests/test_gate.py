"""The trust gate inside `attnbench run` and as `attnbench check`."""

from __future__ import annotations

import io

import torch

from attnbench.gate.verdicts import gate_variant
from attnbench.plan.suite import load_suite
from attnbench.plugins.attention import softmax
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests import broken_variants
from tests.helpers import fake_distribution, run_cli, write_suite

SUITE = """
    version: 1
    name: gate
    allow_failed_checks: {allow}
    defaults:
      data: {{source: stdlib, max_bytes: 100000}}
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
      train: {{batch_size: 2, seq_len: 32, eval_interval: 5, eval_tokens: 512, checkpoint: false}}
    experiments:
      - {{name: e, kind: train, variants: [softmax, leaky], train: {{budget: {{steps: 5}}}}}}
"""


def _registry():
    return load_registry(get_plugin_manager([("softmax", softmax), ("broken", broken_variants)], entry_points=False))


def _run(tmp_path, allow: bool, out: io.StringIO | None = None):
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE.format(allow=str(allow).lower())))
    with Store(tmp_path / "store.sqlite") as store:
        report = run_suite(suite, store, _registry(), device="cpu", out=out or io.StringIO())
        return report, store.runs(), store.checks(variant="leaky")


def test_run_refuses_a_variant_that_fails_a_check(tmp_path):
    report, runs, checks = _run(tmp_path, allow=False)
    assert [r["variant"] for r in runs] == ["softmax"]
    assert runs[0]["provenance"]["gate"]["failed"] == []
    assert len(report.not_done) == 1 and "leaky" in report.not_done[0] and "refused" in report.not_done[0]
    failed = {c["check_name"] for c in checks if c["status"] == "fail"}
    assert failed == {"no_future_leak_forward", "no_future_leak_backward", "leak_at_scale"}


def test_allowed_failures_are_recorded_on_every_row(tmp_path):
    out = io.StringIO()
    report, runs, _ = _run(tmp_path, allow=True, out=out)
    # the log says why each check failed, not only which (a timed-out verdict is not stored)
    assert "    no_future_leak_forward: fail: " in out.getvalue()
    leaky = [r for r in runs if r["variant"] == "leaky"]
    assert len(leaky) == 1 and report.not_done == []
    assert set(leaky[0]["provenance"]["gate"]["failed"]) == {
        "no_future_leak_forward",
        "no_future_leak_backward",
        "leak_at_scale",
    }


def test_verdict_is_cached_per_code_version(tmp_path):
    variant = _registry().get("softmax")
    with Store(tmp_path / "s.sqlite") as store:
        first = gate_variant(variant, store, torch.device("cpu"))
        second = gate_variant(variant, store, torch.device("cpu"))
    assert not first.cached and second.cached and first.key == second.key
    assert [r.status for r in second.results] == [r.status for r in first.results]


def test_check_command_table_and_exit_code(tmp_path):
    env = {
        **fake_distribution(tmp_path, "broken-dist", "broken", module="tests.broken_variants"),
        "ATTNBENCH_PLUGINS": "softmax,broken",
    }
    store = str(tmp_path / "s.sqlite")
    bad = run_cli("check", "leaky", "overflowy", "softmax", "--store", store, env=env)
    assert bad.returncode == 1, bad.stderr
    table = bad.stdout.splitlines()[1:4]  # header, then one row per variant in the order asked
    lines = {line.split()[0]: line for line in table}
    # softmax passes every check; the bf16/fp16 autocast check is skipped (and says so) on a CPU
    assert lines["leaky"].split()[1] == "FAIL" and lines["softmax"].count("pass") == 11
    assert lines["softmax"].split()[-1] == "skip"
    assert "FAIL" in lines["overflowy"] and "1/3 variants passed every check" in bad.stdout
    good = run_cli("check", "softmax", "--store", store, env=env)
    assert good.returncode == 0
    listing = run_cli("list", "--store", store, env=env)
    row = next(line for line in listing.stdout.splitlines() if line.startswith("leaky"))
    assert "FAIL: " in row and all(
        c in row for c in ("no_future_leak_forward", "no_future_leak_backward", "leak_at_scale")
    )
