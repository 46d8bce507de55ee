"""Seeds until decided: the group-sequential design keeps its false-positive rate under optional
stopping (simulated), reduces to the fixed paired t test with one look, and the planner adds a
seed only to an undetermined row (and to the baseline, for pairing), never past max."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from attnbench.experiments.registry import expand_suite, get_kind
from attnbench.plan.seed_rounds import next_seed_cells
from attnbench.plan.suite import load_suite
from attnbench.report.comparison import summary_table
from attnbench.report.decision import decide
from attnbench.report.load import load_store
from attnbench.stats.sequential import Design, simulate
from tests.helpers import write_suite

SIMS = 10_000


def _clopper_pearson(k: int, n: int) -> tuple[float, float]:
    lo = float(stats.beta.ppf(0.025, k, n - k + 1)) if k else 0.0
    hi = float(stats.beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
    return lo, hi


@pytest.mark.parametrize(("spending", "margin"), [("obrien_fleming", None), ("pocock", None), ("obrien_fleming", 0.5)])
def test_no_true_difference_is_called_better_or_worse_at_most_5_percent_of_the_time(spending, margin):
    found = simulate(Design(3, 10, spending), effect=0.0, margin=margin, sims=SIMS, seed=7)
    k = round((found["better"] + found["worse"]) * SIMS)
    lo, hi = _clopper_pearson(k, SIMS)
    print(f"\n{spending}, margin {margin}: false positives {k / SIMS:.4f} [{lo:.4f}, {hi:.4f}], {found}")
    assert lo <= 0.05  # the rate is not above 5% (95% Clopper-Pearson interval)


def test_power_at_a_true_difference_of_one_margin():
    """Per-seed differences N(margin, sd) for sd = margin / 2, margin, 2 margin: the share called better.
    The critical values hold up to skewness 2 and a decision needs 6 paired seeds, so the design
    reaches this power over 6..16 seeds (over 3..10 it is about 0.34)."""
    for sd in (0.5, 1.0, 2.0):
        found = simulate(Design(6, 16), effect=1.0 / sd, margin=1.0 / sd, sims=SIMS, seed=11)
        print(f"\nmargin = {1 / sd:g} sd: power {found['better']:.3f}, mean seeds {found['mean_seeds']:.2f}, {found}")
        if sd == 1.0:
            assert 0.6 < found["better"] < 0.9 and found["worse"] < 0.01


def test_one_look_is_the_fixed_paired_t_test():
    diffs = [0.3, 0.2, 0.25, 0.22, 0.28, 0.26]
    fixed, seq = decide(diffs, 0.05, False), decide(diffs, 0.05, False, Design(6, 6))
    assert (seq.outcome, seq.n) == (fixed.outcome, fixed.n) == ("worse", 6)
    assert (seq.lo, seq.hi) == pytest.approx((fixed.lo, fixed.hi))
    assert seq.exact_p == fixed.exact_p == pytest.approx(2 / 2**6)


def test_an_early_look_needs_far_stronger_evidence_than_the_fixed_test():
    diffs = [0.3, 0.08, 0.25, 0.12, 0.38, 0.17]  # t = 4.66: worse by the fixed 6-seed test (critical 4.15)
    assert decide(diffs, None, False).outcome == "worse"
    early = decide(diffs, None, False, Design(6, 7))  # the first of two looks: critical 4.93
    assert early.outcome == "undetermined" and early.lo is not None and early.hi is not None
    assert early.lo < 0 < early.hi
    tight = [0.3, 0.3001, 0.2999, 0.3002, 0.2998, 0.30005]
    assert decide(tight, None, False, Design(6, 7)).outcome == "worse"
    # a look whose share of the error is below the least sign-flip p (2 / 64) decides nothing, however tight
    assert Design(6, 10).look_alpha(6) < 2 / 2**6
    assert decide(tight, None, False, Design(6, 10)).outcome == "undetermined"
    assert decide(diffs[:5], None, False, Design(6, 7)).hi is None  # before the first look


SUITE = """
    version: 1
    name: rounds
    device: cpu
    experiments:
      - name: text
        kind: train
        variants: [softmax, linear, toy-ema]
        models: [{d_model: 16, n_layer: 1, n_head: 2}]
        data: {source: builtin, test_fraction: 0.05}
        train: {budget: {steps: 4}, batch_size: 2, seq_len: 16, checkpoint: false, checkpoint_interval: 0}
        protocol: {tune: false, metric: loss, seeds: {min: 6, max: 7}}
"""
# test loss per seed: linear clearly worse by the same amount every seed (decided at 6 seeds, the
# fewest a paired decision needs), toy-ema on either side of softmax (undetermined)
LOSS = {
    "softmax": [2.0, 2.1, 2.05, 2.02, 2.08, 2.04, 2.06],
    "linear": [2.5, 2.6001, 2.5499, 2.5202, 2.5798, 2.54005, 2.56],
    "toy-ema": [2.1, 2.0, 2.3, 1.9, 2.2, 1.95, 2.15],
}


def test_a_seed_round_goes_to_the_undetermined_row_and_its_baseline_only(tmp_path, registry):
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE))
    assert suite.experiments[0].seeds == [0, 1, 2, 3, 4, 5]  # the first round: seeds 0..min-1
    cells = expand_suite(suite, registry, device="cpu", corpus_hash=lambda spec: "x")
    stored: dict[str, tuple[str, dict]] = {}

    def store(cs):
        for c in cs:
            stored[c.key] = ("done", {"val_loss": 1.0, "test_loss": LOSS[c.variant][c.seed]})

    store(cells[:-1])
    assert next_seed_cells(suite, cells, stored.get) == []  # the round is not stored yet: wait
    store(cells)
    wave = next_seed_cells(suite, cells, stored.get)
    assert sorted((c.variant, c.seed) for c in wave) == [("softmax", 6), ("toy-ema", 6)]
    assert all(c.key and c.key not in stored and c.coords["seed"] == 6 for c in wave)
    store(wave)
    assert next_seed_cells(suite, [*cells, *wave], stored.get) == []  # max reached: stop


def test_no_seed_round_goes_to_a_row_whose_baseline_has_not_learned(tmp_path, registry):
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE))
    cells = expand_suite(suite, registry, device="cpu", corpus_hash=lambda spec: "x")
    bigram = {"softmax": 2.0, "linear": 3.0, "toy-ema": 3.0}
    stored = {  # every softmax seed's test loss (2.0, 2.1) is above its bigram floor: not learned on any seed
        c.key: ("done", {"val_loss": 1.0, "test_loss": LOSS[c.variant][c.seed], "test_floor_bigram_loss": 1.95})
        for c in cells
    }
    assert next_seed_cells(suite, cells, stored.get) == []  # toy-ema is undetermined, but against no learner
    for c in cells:
        stored[c.key][1]["test_floor_bigram_loss"] = bigram[c.variant] + 1.0  # everyone beyond the bigram
    assert sorted((c.variant, c.seed) for c in next_seed_cells(suite, cells, stored.get)) == [
        ("softmax", 6),
        ("toy-ema", 6),
    ]


def test_protocol_seeds_are_validated(tmp_path):
    from attnbench.errors import SuiteError

    with pytest.raises(SuiteError, match="both"):
        load_suite(write_suite(tmp_path / "a.yaml", SUITE.replace("protocol:", "seeds: [0, 1, 2]\n        protocol:")))
    with pytest.raises(SuiteError, match="max"):
        load_suite(write_suite(tmp_path / "b.yaml", SUITE.replace("max: 7", "max: 1")))
    task = SUITE.replace("metric: loss,", "metric: accuracy, learn_target: 1.5,")
    with pytest.raises(SuiteError, match="at most"):
        load_suite(
            write_suite(
                tmp_path / "c.yaml",
                task.replace("{source: builtin, test_fraction: 0.05}", "{source: task, task: mqar, test_examples: 8}"),
            )
        )
    assert np.isfinite(Design(2, 3).t_crit(3))


def test_a_run_plans_each_round_from_stored_outcomes_and_resumes_it(tmp_path, registry, monkeypatch):
    """The runner's waves, with training and the trust gate stubbed (their own tests cover them):
    each cell stores the test loss of LOSS for its variant and seed."""
    import dataclasses
    import io

    from attnbench.experiments.base import CellOutcome
    from attnbench.experiments.train import cell as train_cell
    from attnbench.gate.verdicts import Verdict
    from attnbench.run import runner
    from attnbench.store.database import Store

    def run(cell, variant, ctx):
        return CellOutcome(
            "done", {"val_loss": 1.0, "test_loss": LOSS[cell.variant][cell.seed], "protocol": cell.protocol}
        )

    stub = dataclasses.replace(train_cell.KIND, run=run)
    from attnbench.run import cell as run_cell

    def kind(name):
        return stub if name == "train" else get_kind(name)

    monkeypatch.setattr(runner, "get_kind", kind)
    monkeypatch.setattr(run_cell, "get_kind", kind)  # the cell runs in run_cell
    monkeypatch.setattr(runner, "gate_variant", lambda variant, *a, **k: Verdict(variant.name, "stub", [], True))
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE))
    with Store(tmp_path / "s.sqlite") as store:
        first = runner.run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        again = runner.run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        runs = store.runs("rounds")
    seeds = {v: sorted(r["seed"] for r in runs if r["variant"] == v) for v in LOSS}
    six = list(range(6))
    assert seeds == {"softmax": [*six, 6], "linear": six, "toy-ema": [*six, 6]}  # linear decided at 6
    assert (first.ran, again.ran, again.skipped) == (20, 0, 20)
    table = summary_table(load_store(tmp_path / "s.sqlite", "rounds"))
    assert table is not None and "O'Brien-Fleming-type Lan-DeMets alpha spending over 6..7 seeds" in table.note
    found = {r["variant"]: r["decision_text"] for _, r in table.data.iterrows()}
    assert found["linear"].endswith("n=6, exact p=0.0312, worse")
    assert re.search(r"n=7, exact p=[\d.]+, undetermined$", found["toy-ema"])
