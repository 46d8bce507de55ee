"""The leak checks probe the lengths the experiment runs at (issue 57, item 1): a mixer that
leaks only past T = 400 passes the fixed lengths and fails once an experiment trains,
evaluates or times it at T >= 512; the lengths are part of the verdict's cache key."""

from __future__ import annotations

import dataclasses
import functools
import io
from types import SimpleNamespace

import pytest
import torch

from attnbench.gate.checks import run_checks
from attnbench.gate.verdicts import cell_lengths, gate_key_inputs, gate_variant
from attnbench.plan.base import Budget, TrainSpec
from attnbench.plan.speed_spec import SpeedSpec
from attnbench.plan.suite import load_suite
from attnbench.plugins.attention import softmax
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from attnbench.store.provenance import content_key
from tests import broken_variants
from tests.helpers import write_suite

LEAKS = ("no_future_leak_forward", "no_future_leak_backward")


@pytest.fixture(scope="module")
def registry():
    return load_registry(get_plugin_manager([("softmax", softmax), ("broken", broken_variants)], entry_points=False))


def _by_check(results):
    return {r.check: r for r in results}


def test_a_leak_past_400_passes_the_fixed_lengths_and_fails_at_an_experiment_length(registry):
    variant = registry.get("leaks_past_400")
    fixed = _by_check(run_checks(variant, long_T=256))
    assert all(fixed[c].status == "pass" for c in LEAKS), {c: fixed[c].detail for c in LEAKS}
    probed = _by_check(run_checks(variant, long_T=256, lengths=(64, 512)))
    for check in LEAKS:
        r = probed[check]
        assert r.status == "fail" and r.figure is not None and r.tolerance is not None, r.detail
        assert r.figure > r.tolerance, r.detail
        assert "T=512 (experiment length)" in r.detail and "experiment lengths T=64/512 probed" in r.detail
    assert (probed["no_future_leak_forward"].figure or 0.0) > 1e-4
    # only the leak checks read the lengths; softmax passes at the same ones
    good = _by_check(run_checks(registry.get("softmax"), long_T=256, lengths=(64, 512)))
    assert all(good[c].status == "pass" and "T=64/512 probed" in good[c].detail for c in LEAKS)


def test_gated_again_at_a_new_length_only_that_length_runs_and_the_verdict_is_a_fresh_ones(registry):
    """Within one process a run gates a variant at each experiment's lengths: the checks that do
    not read the lengths, the fixed lengths and each length already probed are not run again
    (no mixer is built but the new length's probes), and the verdict equals a never-gated twin's."""
    softmax_variant, built = registry.get("softmax"), []

    def counted(config, layer_idx):
        built.append(config.context)
        return softmax_variant.build_mixer(config, layer_idx)

    variant = dataclasses.replace(softmax_variant, name="counted", build_mixer=counted)
    first = run_checks(variant, long_T=256, lengths=(64,))
    built.clear()
    again = run_checks(variant, long_T=256, lengths=(64, 600))
    assert built and set(built) == {600}, built  # the probes at 600 widen the context; nothing else is built
    twin = dataclasses.replace(variant, build_mixer=functools.partial(counted))  # never gated: all run
    fresh = run_checks(twin, long_T=256, lengths=(64, 600))
    assert len(built) > 20  # the twin ran every check
    assert [dataclasses.astuple(r) for r in again] == [dataclasses.astuple(r) for r in fresh]
    assert all(r.ok for r in first + again)
    assert "T=64/600 probed" in _by_check(again)["no_future_leak_forward"].detail


def test_cell_lengths_are_the_training_length_and_the_longest_evaluated_or_timed():
    train = TrainSpec(budget=Budget(steps=1), seq_len=128, eval_lengths=[256, 1024, 512])
    assert cell_lengths(SimpleNamespace(spec=train)) == (128, 1024)
    assert cell_lengths(SimpleNamespace(spec=TrainSpec(budget=Budget(steps=1), seq_len=64))) == (64,)
    speed = SpeedSpec(lengths=[256, 4096], modes=["forward", "train_step"])
    assert cell_lengths(SimpleNamespace(spec=speed)) == (4096,)
    decode = SpeedSpec(T_min=128, T_max=512, modes=["decode"], decode_tokens=8)
    assert cell_lengths(SimpleNamespace(spec=decode)) == (520,)  # the longest context plus the tokens stepped
    assert cell_lengths(SimpleNamespace(spec=None)) == ()


def test_the_lengths_are_part_of_the_cache_key(registry, tmp_path):
    variant = registry.get("softmax")
    assert content_key(gate_key_inputs(variant, "cpu", lengths=(64,))) != content_key(gate_key_inputs(variant, "cpu"))
    assert content_key(gate_key_inputs(variant, "cpu", lengths=(512, 64))) == content_key(
        gate_key_inputs(variant, "cpu", lengths=(64, 512))
    )
    with Store(tmp_path / "s.sqlite") as store:
        short = gate_variant(variant, store, torch.device("cpu"), long_T=64, lengths=(64,))
        longer = gate_variant(variant, store, torch.device("cpu"), long_T=64, lengths=(64, 512))
        again = gate_variant(variant, store, torch.device("cpu"), long_T=64, lengths=(64, 512))
    assert not short.cached and not longer.cached and again.cached  # a longer experiment is checked anew
    assert short.key != longer.key == again.key


SUITE = """
    version: 1
    name: lengths
    defaults:
      data: {source: stdlib, max_bytes: 100000}
      model: {d_model: 32, n_layer: 1, n_head: 2, positions: none}
      train: {batch_size: 2, seq_len: 32, eval_interval: 5, eval_tokens: 256, checkpoint: false}
    experiments:
      - {name: short, kind: train, variants: [leaks_past_400], train: {budget: {steps: 2}}}
      - {name: long, kind: train, variants: [leaks_past_400], train: {budget: {steps: 2}, eval_lengths: [64, 512]}}
"""


def test_run_refuses_the_experiment_that_evaluates_past_the_leak(registry, tmp_path):
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE))
    out = io.StringIO()
    with Store(tmp_path / "store.sqlite") as store:
        report = run_suite(suite, store, registry, device="cpu", out=out)
        runs = store.runs()
    assert [r["experiment"] for r in runs] == ["short"]  # trained at 32: no leak there
    assert len(report.not_done) == 1 and "long" in report.not_done[0] and "refused" in report.not_done[0]
    log = out.getvalue()
    assert "no_future_leak_forward: fail: " in log and "T=512 (experiment length)" in log
