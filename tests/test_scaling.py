"""Scaling experiments: sizes trained at budgets proportional to their measured parameter
count and learning rates transferred by width; a suite with fewer than four sizes is refused
at load (three sizes would interpolate a three-parameter law); tests/test_scaling_fits.py covers
the fits, and that three sizes give no exponent."""

from __future__ import annotations

import io
import math

import pytest
import torch

from attnbench.errors import SuiteError
from attnbench.experiments.scaling import size_lr
from attnbench.plan.scaling_spec import ScalingSpec
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import load_registry
from attnbench.run.runner import run_suite
from attnbench.stats.power_laws import fit_power_law
from attnbench.store.database import Store
from tests.helpers import REPO, write_suite

SUITE = """
    version: 1
    name: scaling-test
    device: cpu
    experiments:
      - name: sizes
        kind: scaling
        variants: [softmax]
        data: {source: stdlib, max_bytes: 300000}
        models:
          - {d_model: 16, n_layer: 1, n_head: 2}
          - {d_model: 24, n_layer: 1, n_head: 2}
          - {d_model: 32, n_layer: 1, n_head: 2}
          - {d_model: 48, n_layer: 2, n_head: 2}
        scaling:
          tokens_per_param: 0.5
          exponent_margin: 0.05
          batch_size: 4
          seq_len: 32
          lr: 1.0e-2
          warmup_steps: 2
          eval_interval: 100000
          eval_tokens: 2048
          log_interval: 10
          checkpoint: false
          checkpoint_interval: 0
"""


@pytest.fixture
def one_thread():
    """One CPU thread for in-process training: on a shared 2-core machine, two OpenMP
    threads spin against other processes and run many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_sizes_train_at_proportional_budgets_and_store_a_fit(tmp_path, one_thread):
    suite = load_suite(write_suite(tmp_path / "scaling.yaml", SUITE))
    registry = load_registry()
    with Store(tmp_path / "s.sqlite") as store:
        report = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert report.ran == 4 and report.not_done == []
        runs = sorted(store.runs(kind="scaling"), key=lambda r: r["summary"]["n_params"])
        assert len(runs) == 4
        for run in runs:
            s = run["summary"]
            assert s["budget_rule"] == {"tokens_per_param": 0.5}
            # tokens = 0.5 N, rounded up to whole steps of 4 x 32 tokens
            assert 0.5 * s["n_params"] <= s["tokens"] < 0.5 * s["n_params"] + 128
            assert s["train_flops_per_token"] > 0 and math.isfinite(s["val_loss"])
        sizes = [r["summary"]["n_params"] for r in runs]
        assert sizes == sorted(set(sizes))
        fits = store.runs(kind="scaling_fit")
        assert [f["variant"] for f in fits] == ["softmax"]
        rows = {r["tags"]["x"]: r for r in store.results(fits[0]["id"]) if r["name"] == "power_law"}
        assert set(rows) == {"params", "flops"}
        for row in rows.values():  # 4 sizes: a law is fitted, with the suite's exponent margin stored
            tags = row["tags"]
            assert tags["n_points"] == 4 and len(tags["seed_losses"]) == 4 and tags["exponent_margin"] == 0.05
            assert tags["error"] is None and row["value"] == tags["b"] and math.isfinite(tags["b"])
        assert rows["params"]["tags"]["sizes"] == [r["summary"]["n_params_non_embedding"] for r in runs]
        for run, d in zip(runs, (16, 24, 32, 48), strict=True):  # the rate transferred by width
            assert run["summary"]["lr"] == pytest.approx(size_lr(1.0e-2, d))
            assert 0 < run["summary"]["n_params_non_embedding"] < run["summary"]["n_params"]
        # nothing changed: no cell re-runs and the fit is not stored twice
        again = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert again.ran == 0 and len(store.runs(kind="scaling_fit")) == 1


def test_power_law_fit_recovers_known_parameters():
    N = [1e4, 3e4, 1e5, 3e5, 1e6, 3e6]
    fit = fit_power_law(N, [5.0 * n**-0.3 + 1.5 for n in N])
    assert math.isclose(fit.b, 0.3, rel_tol=1e-4) and math.isclose(fit.c, 1.5, rel_tol=1e-4)
    assert math.isclose(fit.a, 5.0, rel_tol=1e-3) and fit.rmse < 1e-6 and fit.n_points == 6
    noisy = fit_power_law(
        N, [(5.0 * n**-0.3 + 1.5) * (1 + e) for n, e in zip(N, (0.002, -0.003, 0.001, 0.002, -0.001, 0.0), strict=True)]
    )
    assert abs(noisy.b - 0.3) < 0.1 and abs(noisy.c - 1.5) < 0.2
    flat = fit_power_law([1e3, 1e4, 1e5], [2.0, 2.0, 2.0])  # no size effect: b or a ~ 0
    assert flat.rmse < 1e-6
    with pytest.raises(ValueError):
        fit_power_law([1e3, 1e4], [3.0, 2.0])


def test_scaling_spec_rules():
    spec = ScalingSpec(tokens_per_param=20, seq_len=64, batch_size=2)
    train = spec.train_spec(1000)
    assert train.budget.tokens == 20000 and train.seq_len == 64 and train.batch_size == 2
    assert ScalingSpec(flops_per_param=1e6).train_spec(10).budget.flops == 1e7
    with pytest.raises(ValueError):
        ScalingSpec()
    with pytest.raises(ValueError):
        ScalingSpec(tokens_per_param=1, flops_per_param=1)
    with pytest.raises(ValueError):
        ScalingSpec.model_validate({"tokens_per_param": 1, "budget": {"steps": 10}})


def test_scaling_suite_needs_four_sizes(tmp_path):
    three = write_suite(
        tmp_path / "three.yaml",
        """
        version: 1
        name: three
        experiments:
          - name: s
            kind: scaling
            models: [{d_model: 16}, {d_model: 32}, {d_model: 48}]
            scaling: {tokens_per_param: 1}
    """,
    )
    with pytest.raises(SuiteError, match="at least 4 different model sizes in 'models', got 3.*too few to fit"):
        load_suite(three)
    assert load_suite(REPO / "suites" / "scaling.yaml").experiments[0].kind == "scaling"
