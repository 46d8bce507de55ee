"""Issue 67 items 3-5, each through what a user reads: the Problems list of a report whose suite has
no train or speed experiment; the captions naming the rule that chose the reported point; the
baseline's own summary.csv row; the documents a plugin author and a store reader follow."""

from __future__ import annotations

import re
import sqlite3

import pandas as pd
import pytest

import attnbench
from attnbench.cli import main
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.report.selection import choice_text
from attnbench.store.database import Result, Store
from tests.helpers import REPO
from tests.report_store import SUITE, record, write_store

LOAD = {"load_before": {"load1": 7.5, "cpus": 2}, "load_after": {"load1": 9.0, "cpus": 2}}


def _report_md(tmp_path, runs, suite: str) -> str:
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        for run in runs:
            store.save_run(run)
    out = tmp_path / "report"
    assert main(["report", "--store", str(path), "--suite", suite, "--out", str(out)]) == 0
    return (out / "report.md").read_text(encoding="utf-8").replace("\\", "")


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_a_scaling_only_suite_lists_its_loaded_and_failed_runs_under_problems(tmp_path):
    """Item 3: 'Problems: None' on a scaling suite trained under load."""
    summary = {"throughput_under_load": True, **LOAD, "val_loss": 3.0}
    runs = [record(f"sc-{i}", "scaling-cpu", "scaling", "softmax", i, {}, {}, summary, suite="sc") for i in range(2)]
    runs.append(record("sc-2", "scaling-cpu", "scaling", "softmax", 2, {}, {}, {}, status="failed", suite="sc"))
    problems = _section(_report_md(tmp_path, runs, "sc"), "Problems")
    assert "throughput under load" in problems and "scaling-cpu (2 of 3 runs)" in problems
    assert "failed" in problems and "scaling-cpu (scaling, seed 2)" in problems


def test_a_speed_only_suite_notes_its_noisy_point_and_lists_its_loaded_one(tmp_path):
    tags = {"mode": "forward", "status": "ok", "mean_s": 0.01, "rounds": 7, "attempts": 3}
    noisy = {**tags, "T": 256, "noisy": True, "noisy_reason": "coefficient of variation 25% > 20%"}
    loaded = {
        **tags,
        "T": 1024,
        "noisy": True,
        "noisy_reason": "machine under load (load average 6.00 before, 6.50 after, 2 CPUs)",
        **LOAD,
    }
    results = [Result("time_s", 0.01, "s", noisy), Result("time_s", 0.04, "s", loaded)]
    md = _report_md(tmp_path, [record("sp", "speed", "speed", "softmax", 0, {}, {}, {}, results, suite="sp")], "sp")
    assert "speed forward T=256" in _section(md, "Notes") and "noisy" in _section(md, "Notes")
    assert "speed forward T=1024" in _section(md, "Problems") and "timed under load" in _section(md, "Problems")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(load_store(write_store(tmp_path_factory.mktemp("store") / "s.sqlite"), SUITE))


def test_the_captions_name_the_rule_that_chose_each_experiments_point(report):
    """Item 4: the synthetic text experiment is tuned on validation loss, its recall grid is not."""
    summary = next(t for s in report.sections for t in s.tables if t.slug == "summary")
    assert "text: tuning on validation loss, near-ties" in summary.note
    assert "recall: the lowest mean validation loss over its seeds" in summary.note
    text = next(s for s in report.sections if s.title == "Training: text")
    assert "Here the point is chosen by tuning on validation loss" in text.intro
    recall = next(s for s in report.sections if s.title == "Training: recall")
    assert "Here the point is chosen by the lowest mean validation loss over its seeds" in recall.intro
    tuned = pd.DataFrame({"coords": [{"stage": "tune"}, {"stage": "final"}]})
    assert choice_text(tuned, {"tuning": {"criterion": "accuracy"}}).startswith(
        "tuning on validation accuracy beyond the null"
    )


def test_the_baselines_own_rows_read_baseline(report):
    """Item 4: the baseline's summary.csv decision_text read 'no paired seeds'."""
    rows = next(t for s in report.sections for t in s.tables if t.slug == "summary").data
    own = rows[rows["variant"] == rows["baseline"]]
    assert len(own) == 5  # text, and recall overall and at each of its 3 settings
    assert set(own["decision"]) == {"baseline"} and set(own["decision_text"]) == {"baseline"}


def test_store_md_documents_every_table_and_the_summary_fields_the_report_reads(tmp_path):
    """Item 5: docs/store.md names each table of a fresh store and each summary field a report reads."""
    doc = (REPO / "docs" / "store.md").read_text(encoding="utf-8")
    with Store(tmp_path / "s.sqlite"):
        pass
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    tables = [t for t in tables if not t.startswith("sqlite_")]
    assert tables and all(f"| `{t}` |" in doc for t in tables), tables
    fields = doc.split("## `summary` of a train run", 1)[1].split("\n## ", 1)[0]
    read = [
        "val_loss",
        "test_loss",
        "test_accuracy",
        "test_answers_total",
        "test_guess_accuracy",
        "floor_method",
        "protocol",
        "state_elements",
        "throughput_under_load",
        "load_before",
        "load_after",
        "diverged_at_step",
    ]
    assert [f for f in read if f"`{f}`" not in fields] == []


def test_plugins_md_says_what_a_task_batch_holds_and_where_it_comes_from():
    """Item 5: targets are next-token aligned int64 tensors; TaskBatch and IGNORE come from attnbench."""
    doc = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert "from attnbench import IGNORE, Task, TaskBatch" in doc
    assert "`torch.int64` tensors of shape (n, T)" in doc and "**already aligned**" in doc
    assert re.search(r"`IGNORE` \((-?\d+)\)", doc)[1] == str(attnbench.IGNORE)  # type: ignore[index]
    assert {"IGNORE", "TaskBatch", "Task"} <= set(attnbench.__all__)


def test_export_md_loads_the_tokenizer_as_remote_code():
    """Item 5: the byte tokenizer is remote code: without trust_remote_code transformers asks [y/N]."""
    doc = (REPO / "docs" / "export.md").read_text(encoding="utf-8")
    loads = re.findall(r"AutoTokenizer\.from_pretrained\(([^)]*)\)", doc)
    assert loads and all("trust_remote_code=True" in args for args in loads)
