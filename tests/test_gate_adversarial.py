"""Adversarial third-party mixers (issue 65; ``tests/adversarial_variants.py``), each wrong in a way
real kernels go wrong and each passing the gate before it: every one is refused by `attnbench run`
on a tiny suite and by the `attnbench check` command its refusal names, and the failed check names
the position or the parameter. `attnbench list` says which lengths each verdict covers."""

from __future__ import annotations

import io
import re
import shlex

import pytest

from attnbench.plan.suite import load_suite
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests import adversarial_variants
from tests.adversarial_variants import BAND
from tests.helpers import fake_distribution, run_cli, write_suite

SUITE = """
    version: 1
    name: adversarial
    defaults:
      data: {source: stdlib, max_bytes: 100000}
      model: {d_model: 32, n_layer: 1, n_head: 2, positions: none}
      train: {batch_size: 2, seq_len: 32, eval_interval: 5, eval_tokens: 256, checkpoint: false, budget: {steps: 2}}
    experiments:
      - {name: long, kind: train, variants: [band_leak], train: {eval_lengths: [64, 2048]}}
      - name: mid
        kind: train
        variants: [chunk_edge, step_after_400, grad_off_1e2, grad_off_1e3_fp32]
        train: {eval_lengths: [64, 512]}
"""
LENGTHS = {"band_leak": "--lengths 32 2048", "step_after_400": "--lengths 32 512"}


def _band(detail: str) -> bool:
    m = re.search(r"T=2048 \(experiment length\), t=(\d+), first leaking output position (\d+)", detail)
    return m is not None and BAND[0] <= int(m[2]) <= int(m[1]) <= BAND[1]


def _edge(detail: str) -> bool:
    m = re.search(r"t=(\d+), first leaking output position (\d+)", detail)
    return m is not None and int(m[1]) == int(m[2]) and (int(m[2]) + 1) % 64 == 0


EXPECTED = {  # variant -> (the check that refuses it, what its detail must name)
    "band_leak": ("no_future_leak_forward", _band),
    "chunk_edge": ("no_future_leak_forward", _edge),
    "step_after_400": ("incremental_equals_parallel", lambda d: "first over tolerance at position 400" in d),
    "grad_off_1e2": ("grad_finite_difference", lambda d: "OVER TOLERANCE c_proj.weight (weights x1)" in d),
    "grad_off_1e3_fp32": ("grad_float64_at_scale", lambda d: "OVER TOLERANCE c_proj.weight;" in d),
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The suite run once: (report, log, store path)."""
    tmp = tmp_path_factory.mktemp("adversarial")
    registry = load_registry(get_plugin_manager([("adversarial", adversarial_variants)], entry_points=False))
    suite = load_suite(write_suite(tmp / "s.yaml", SUITE))
    out = io.StringIO()
    with Store(tmp / "store.sqlite") as store:
        report = run_suite(suite, store, registry, device="cpu", out=out)
        assert store.runs() == []  # every one refused: nothing trained
    return report, out.getvalue(), tmp / "store.sqlite", tmp


def test_run_refuses_each_naming_the_check_and_the_position_or_parameter(ran):
    report, log, store_path, _ = ran
    with Store(store_path) as store:
        for name, (check, names_it) in EXPECTED.items():
            refusal = next(line for line in report.not_done if f"/{name} seed" in line)
            assert "refused" in refusal and check in refusal, refusal
            rows = {r["check_name"]: r for r in store.checks(variant=name)}
            assert rows[check]["status"] == "fail", (name, rows[check]["detail"])
            assert names_it(rows[check]["detail"]), (name, rows[check]["detail"])
            assert f"    {check}: fail: " in log


def test_the_refusal_names_a_command_that_fails_the_same_way_and_list_shows_the_lengths(ran):
    report, _, store_path, tmp = ran
    env = {
        **fake_distribution(tmp, "adversarial-dist", "adversarial", module="tests.adversarial_variants"),
        "ATTNBENCH_PLUGINS": "adversarial",
    }
    for name in ("band_leak", "step_after_400"):
        refusal = next(line for line in report.not_done if f"/{name} seed" in line)
        command = re.search(r"reproduce: `([^`]+)`", refusal)
        assert command is not None and LENGTHS[name] in command[1] and str(store_path) in command[1], refusal
        words = shlex.split(command[1])
        assert words[:3] == ["attnbench", "check", name]
        done = run_cli(*words[1:], "--verbose", env=env)
        assert done.returncode == 1, done.stderr
        check, names_it = EXPECTED[name]
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"{name} / {check}: FAIL"))
        assert names_it(line), line
    listing = run_cli("list", "--store", str(store_path), env=env)
    row = next(x for x in listing.stdout.splitlines() if x.startswith("band_leak"))
    assert "FAIL: " in row and "no_future_leak_forward" in row and "(fixed lengths + T 32/2048)" in row, row


def test_the_fixed_lengths_alone_refuse_the_edge_and_the_gradients(ran):
    """The chunk-edge leak and both wrong backwards need no experiment length: `attnbench check
    NAME` alone fails them (a fresh store)."""
    _, _, _, tmp = ran
    env = {
        **fake_distribution(tmp, "adversarial-dist2", "adversarial", module="tests.adversarial_variants"),
        "ATTNBENCH_PLUGINS": "adversarial",
    }
    names = ["chunk_edge", "grad_off_1e2", "grad_off_1e3_fp32"]
    done = run_cli("check", *names, "--store", str(tmp / "fresh.sqlite"), "--verbose", env=env)
    assert done.returncode == 1 and "0/3 variants passed every check" in done.stdout, done.stdout
    for name in names:
        check, names_it = EXPECTED[name]
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"{name} / {check}: FAIL"))
        assert names_it(line), line
