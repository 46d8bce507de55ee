"""Time to learn says one thing in every unit (issue 67 item 2). Steps, tokens and seconds time one
event; a seed that never reaches the target is censored at its own end in each (its last step, its
last second). The issue's case: one seed reached the target at 15.7 s, another ran its 1,500 steps
in 12 s without reaching it: in seconds that seed leaves the risk set before the event, so the
seconds' Kaplan-Meier falls to 0.5 ('15.7 [15.7, not reached]') while the steps' says 'median not
reached'. A median is stated in every unit or in none. And the first screen's time-to-learn
sentence heads with what holds for every row (no final decision), not 'undetermined' over rows
that are not learned."""

from __future__ import annotations

import pytest

from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.store.database import Metric, Result, Store
from tests.report_store import protocol_dict, record

SUITE = "clocks"
STEPS = 1500
EVERY = 100
NULL = 0.25
# Per variant and seed: (the step the validation accuracy first reaches 0.9, or None; seconds per step).
RUNS = {
    "softmax": [(600, 0.01), (600, 0.01), (600, 0.01)],
    "future": [(1200, 15.7 / 1200), (None, 12.0 / STEPS), (None, 20.0 / STEPS)],  # the seeds
    "linear": [(1200, 15.7 / 1200), (1400, 12.0 / 1400), (None, 20.0 / STEPS)],  # 2 of 3: a median in both
}
TEST_ACC = {"softmax": (0.95, 0.96, 0.97), "future": (0.25, 0.26, 0.24), "linear": (0.95, 0.93, 0.26)}


def _store(path):
    protocol = {**protocol_dict("accuracy", [], None), "tune": False}
    with Store(path) as store:
        for variant, seeds in RUNS.items():
            for seed, (step, rate) in enumerate(seeds):
                acc = TEST_ACC[variant][seed]
                tags = {"split": "test", "task": "mqar"}
                results = [Result("guess_accuracy", NULL, "", tags), Result("answers", 1024.0, "count", tags)]
                summary = {
                    "val_loss": 1.0,
                    "test_loss": 1.0,
                    "test_accuracy": acc,
                    "test_guess_accuracy": NULL,
                    "test_answers_total": 1024.0,
                    "protocol": protocol,
                }
                config = {"data": {"source": "task", "task": "mqar"}, "train": {"budget": {"steps": STEPS}}}
                run = record(
                    f"{variant}-{seed}", "recall", "train", variant, seed, {}, config, summary, results, suite=SUITE
                )
                run.metrics = [
                    Metric(s, s * 64, s * rate, "val/accuracy", 0.95 if step is not None and s >= step else 0.3)
                    for s in range(EVERY, STEPS + 1, EVERY)
                ]
                store.save_run(run)
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(load_store(_store(tmp_path_factory.mktemp("store") / "s.sqlite"), SUITE))


def _table(report):
    section = next(s for s in report.sections if s.title == "Time to learn")
    table = section.tables[0]
    return table, table.view.set_index("variant"), table.data.set_index("variant")


def test_a_censored_seed_that_ran_its_steps_sooner_makes_no_median_in_seconds(report):
    table, view, data = _table(report)
    assert view.loc["future", "reached (others censored)"] == "1 of 3 seeds"
    assert view.loc["future", "steps [95%]"] == f"median not reached in {STEPS} steps"
    assert view.loc["future", "seconds [95%]"] == "median not reached in 20 seconds"  # not '15.7 [15.7, ...]'
    assert view.loc["future", "tokens [95%]"] == f"median not reached in {STEPS * 64} tokens"
    assert data.loc["future", ["median_steps", "median_tokens", "median_seconds"]].isna().all()  # the CSV too
    assert "a median is stated in every unit or in none" in table.note


def test_where_half_or_more_reached_every_unit_states_its_median(report):
    _, view, _ = _table(report)
    assert view.loc["linear", "reached (others censored)"] == "2 of 3 seeds"
    assert view.loc["linear", "steps [95%]"].startswith("1400 [")
    assert view.loc["linear", "seconds [95%]"].startswith("15.7 [")  # 12 s at step 1400 comes first in seconds
    assert view.loc["softmax", "seconds [95%]"].startswith("6 [")


def test_the_first_screen_heads_time_to_learn_with_what_holds_for_every_row(report):
    rows = next(t for s in report.sections for t in s.tables if t.slug == "summary").data.set_index("variant")
    assert rows.loc["future", "decision"] == "not learned"  # at chance: not undetermined
    assert report.headline is not None
    clause = next(n for n in report.headline.notes if ", time to 0.9 accuracy (" in n)
    assert clause.startswith("recall, time to 0.9 accuracy (no final accuracy decided at this budget): ")
    assert "undetermined" not in clause.split(": ", 1)[0]
    assert f"future median not reached in {STEPS} steps (1 of 3 seeds reached it" in clause
