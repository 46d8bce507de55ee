"""Report defects of issue 55, item 4, each pinned by a test that failed before its fix:
an equivalent row under seeds-until-decided read "undetermined"; the synthetic-task table pooled
validation and test and averaged answer counts; the first screen quoted a noisy speed point and
used another speed estimator than the summary table."""

from __future__ import annotations

import re
from typing import Any

import pytest

from attnbench.report.build import build_report
from attnbench.report.decision import decide
from attnbench.report.load import load_store
from attnbench.report.ratios import ratio_text
from attnbench.stats.sequential import Design
from attnbench.store.database import Result, RunRecord, Store
from tests.report_store import SUITE, protocol_dict, record, write_store


def test_an_equivalent_row_of_seeds_until_decided_reads_equivalent():
    diffs = [0.001, -0.002, 0.0015, -0.0005, 0.0, 0.001]  # far inside ±0.05, tight
    d = decide(diffs, 0.05, False, Design(3, 6))
    assert d.outcome == "equivalent" and d.within_margin
    assert "equivalent" in d.text(decimals=3)


TASK_SUITE = "tasks"
# answer accuracy per seed on each split at 4 pairs: validation reads high, test lower
TASK_ACC = {"val": (0.90, 0.92, 0.94), "test": (0.60, 0.62, 0.64)}
ANSWERS = {"val": 500.0, "test": 800.0}  # answer positions scored per seed and split


def _task_store(path, splits=("val", "test")):
    protocol = {**protocol_dict("accuracy", [], None), "tune": False}
    with Store(path) as store:
        for seed in range(3):
            results = []
            for split in splits:
                tags = {"split": split, "task": "mqar", "num_kv_pairs": 4}
                results += [
                    Result("accuracy", TASK_ACC[split][seed], "", tags),
                    Result("answers", ANSWERS[split], "count", tags),
                    Result("loss", 1.0, "nats/token", tags),
                ]
            store.save_run(
                record(
                    f"softmax-{seed}",
                    "recall",
                    "train",
                    "softmax",
                    seed,
                    {},
                    {"data": {"source": "task", "task": "mqar"}, "train": {"budget": {"steps": 100}}},
                    {"val_loss": 1.0, "test_loss": 1.0, "test_accuracy": TASK_ACC["test"][seed], "protocol": protocol},
                    results,
                    suite=TASK_SUITE,
                )
            )
    return path


def _task_table(path):
    report = build_report(load_store(path, TASK_SUITE))
    return next(t for s in report.sections for t in s.tables if t.slug == "recall-tasks")


def test_task_scores_by_difficulty_keep_one_split_and_sum_answer_counts(tmp_path):
    table = _task_table(_task_store(tmp_path / "s.sqlite"))
    assert "test split" in table.title
    data = table.data
    acc = data[data["metric"] == "accuracy"]
    assert len(acc) == 1 and set(acc["split"]) == {"test"}  # not validation and test pooled
    row = acc.iloc[0]
    assert row["seeds"] == 3 and row["mean"] == pytest.approx(0.62)  # n = 3 runs, not 6
    answers = data[data["metric"] == "answers"].iloc[0]
    assert answers["total"] == 3 * ANSWERS["test"]  # summed over seeds, not averaged
    view = table.view[table.view["metric"] == "answers"].iloc[0]
    assert "2400" in view["value, mean ± 95% CI"] and "±" not in view["value, mean ± 95% CI"]


def test_task_scores_read_validation_where_no_test_split_was_scored(tmp_path):
    table = _task_table(_task_store(tmp_path / "s.sqlite", splits=("val",)))
    assert "validation split" in table.title
    acc = table.data[table.data["metric"] == "accuracy"].iloc[0]
    assert acc["split"] == "val" and acc["mean"] == pytest.approx(0.92) and acc["seeds"] == 3


def _speed_run(key: str, variant: str, T: int, median: float, mean: float, noisy: bool = False) -> RunRecord:
    """A train-step point timed in 20 rounds whose median and mean differ (the store's own points
    have 7 rounds, so this one is the point the report reads at T)."""
    tags = {
        "mode": "train_step",
        "T": T,
        "status": "ok",
        "mean_s": mean,
        "stddev_s": mean * 0.05,
        "rounds": 20,
        "noisy": noisy,
        "noisy_reason": "coefficient of variation 73% > 20%" if noisy else None,
    }
    return record(key, "speed-more", "speed", variant, 0, {}, {}, {}, [Result("time_s", median, "s", tags)])


def _first_screen(path):
    report = build_report(load_store(path, SUITE))
    tables = {t.slug: t for s in report.sections for t in s.tables}
    assert report.headline is not None
    return report.headline, tables["summary"], tables["speedup-pivot"]


def _linear(summary, column: str, view: bool = False) -> Any:
    """The text experiment's linear row's ``column``, raw or as the reader sees it (view)."""
    if view:
        return summary.view.set_index(["experiment", "variant"]).loc[("text", "linear"), column]
    return summary.data.set_index(["experiment", "variant", "setting"]).loc[("text", "linear", "all test sets"), column]


def test_one_speed_estimator_on_the_first_screen_the_summary_and_the_pivot(tmp_path):
    extra = [
        _speed_run("sm-1024", "softmax", 1024, median=0.100, mean=0.110),
        _speed_run("lin-1024", "linear", 1024, median=0.077, mean=0.070),
    ]
    head, summary, pivot = _first_screen(write_store(tmp_path / "s.sqlite", extra))
    ratio = 0.110 / 0.070  # the ratio of the rounds' means (the medians would say 1.30)
    assert _linear(summary, "train_step_speedup") == pytest.approx(ratio) and _linear(summary, "train_step_T") == 1024
    assert pivot.data.set_index(["mode", "variant"]).loc[("train_step", "linear"), "T=1024"] == pytest.approx(ratio)
    lo, hi = float(_linear(summary, "train_step_speedup_lo")), float(_linear(summary, "train_step_speedup_hi"))
    quoted = ratio_text(ratio, lo, hi)  # one rounding: the first screen's
    assert quoted.startswith("1.57x faster [")
    assert _linear(summary, "train-step speedup", view=True) == f"{quoted} at T=1024"
    linear = next(s for s in head.notes if s.startswith("linear:"))
    assert f"{quoted} at T=1024" in linear


def test_the_first_screen_does_not_quote_a_noisy_speed_point(tmp_path):
    extra = [_speed_run("lin-1024", "linear", 1024, median=0.077, mean=0.077, noisy=True)]
    head, summary, _ = _first_screen(write_store(tmp_path / "s.sqlite", extra))
    linear = next(s for s in head.notes if s.startswith("linear:"))
    assert re.search(r"train step 1\.25x slower \[[\d.]+, [\d.]+\] at T=256, not quoted at T=1024 \(noisy", linear)
    assert "faster" not in linear.split("train step")[1]  # the T=1024 ratio itself is not given
    assert "noisy" in head.method
    assert "(noisy timing" in str(_linear(summary, "train-step speedup", view=True))  # the table keeps it, marked
    assert bool(_linear(summary, "train_step_noisy"))
