"""Nothing lost, nothing silently wrong: failed cells retried with their history kept,
corrupt or read-only stores refused before compute, a result whose write failed kept
beside the store and imported, strict JSON, and stores merged and checked."""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import math
import os
import re
import shutil
import sqlite3

import pytest

import attnbench.experiments.train.cell as train_cell
import attnbench.nn.checkpoint as checkpoint_module
from attnbench.errors import StoreError
from attnbench.experiments.registry import get_kind
from attnbench.plan.suite import load_suite
from attnbench.run.runner import run_suite
from attnbench.store import sidefile
from attnbench.store.database import Metric, Result, RunRecord, Store
from attnbench.store.merge import merge_stores
from tests.helpers import run_cli, write_suite

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
SUITE = """
    version: 1
    name: {name}
    defaults:
      data: {{source: builtin, max_bytes: 60000}}
      model: {{d_model: 16, n_layer: 1, n_head: 2}}
      train: {{batch_size: 2, seq_len: 16, lr: 1.0e-2, warmup_steps: 1,
              eval_interval: 4, eval_tokens: 256, log_interval: 2}}
    experiments:
      - name: cells
        kind: train
        variants: [softmax]
        train: {{budget: {{steps: 4}}}}
        seeds: {seeds}
"""


def _record(key: str, status: str = "done", summary: dict | None = None, started: float = 0.0) -> RunRecord:
    return RunRecord(
        cell_key=key,
        suite="s",
        experiment="e",
        kind="train",
        variant="softmax",
        status=status,
        seed=0,
        coords={},
        config={},
        provenance={"host": "a"},
        summary=summary or {"val_loss": 1.5},
        started_at=started,
        finished_at=started + 1,
        error=None if status == "done" else "RuntimeError: boom",
        metrics=[Metric(1, 10, 0.1, "train/loss", 2.0)],
        results=[Result("loss", 1.5, "nats")],
    )


# -- failed cells are retried, their history kept ----------------------------------------


def test_a_failed_cell_is_retried_and_its_failure_kept(tmp_path, registry, monkeypatch, request):
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE.format(name="retry", seeds="[0]")))
    real = train_cell.KIND

    def transient(cell, variant, ctx):
        raise RuntimeError("transient fault")

    monkeypatch.setattr(train_cell, "KIND", dataclasses.replace(real, run=transient))
    get_kind.cache_clear()
    request.addfinalizer(get_kind.cache_clear)  # get_kind caches the kind it found
    with Store(tmp_path / "store.sqlite") as store:
        first = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert first.ran == 1 and [r["status"] for r in store.runs()] == ["failed"]
        monkeypatch.setattr(train_cell, "KIND", real)  # the cause is fixed
        get_kind.cache_clear()
        kept = run_suite(suite, store, registry, device="cpu", out=io.StringIO(), retry_failed=False)
        assert kept.skipped == 1 and [r["status"] for r in store.runs()] == ["failed"]
        second = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert second.ran == 1 and second.not_done == []
        [run] = store.runs()
        assert run["status"] == "done" and run["summary"]["steps"] == 4
        [attempt] = store.attempts(run["cell_key"])
        assert attempt["status"] == "failed" and "transient fault" in attempt["error"]
        third = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert third.skipped == 1 and third.ran == 0  # a finished cell is not run again


class _FillingFile(io.RawIOBase):
    """A file on a disk that fills after ``room`` bytes: torch's writer then raises a RuntimeError
    ("unexpected pos") while handling the OSError, as on a real full disk."""

    def __init__(self, room: int) -> None:
        self.room = room

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return len(b)


def test_a_full_disk_is_one_line_per_run_and_no_traceback(tmp_path, registry, monkeypatch):
    text = SUITE.format(name="full", seeds="[0, 1]").replace("{steps: 4}}", "{steps: 4}, checkpoint_interval: 2}")
    suite = load_suite(write_suite(tmp_path / "s.yaml", text))
    monkeypatch.setattr(checkpoint_module, "open", lambda _path, _mode: _FillingFile(room=4096), raising=False)
    out = io.StringIO()
    with Store(tmp_path / "store.sqlite") as store:
        report = run_suite(suite, store, registry, device="cpu", out=out)
        runs = store.runs()
    line = f"no space left on device at {tmp_path / 'checkpoints'}; nothing stored for this cell"
    assert [(r["status"], r["error"]) for r in runs] == [("failed", line)] * 2
    assert out.getvalue().count("no space left on device") == 1 and "Traceback" not in out.getvalue()
    assert report.not_done == [
        f"cells/softmax seed 0: failed ({line})",
        "cells/softmax seed 1: failed (the same error as cells/softmax seed 0)",
    ]


def test_a_diverged_cell_is_a_result_and_not_retried(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        store.save_run(_record("k", status="diverged"))
        assert store.settled("k") and store.save_run(_record("k")) is None
        store.save_run(_record("f", status="failed"))
        assert not store.settled("f") and store.settled("f", retry_failed=False)


def test_the_report_shows_earlier_attempts(tmp_path):
    from attnbench.report import write_report

    with Store(tmp_path / "s.sqlite") as store:
        store.save_run(_record("k", status="failed"))
        store.save_run(_record("k", started=5.0))
    md = (write_report(tmp_path / "s.sqlite", "s").parent / "report.md").read_text()
    assert "earlier attempt" in md and "RuntimeError: boom" in md


# -- faults found when the store is opened, before any compute -------------------------


def test_a_corrupt_store_is_refused_before_anything_runs(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        for i in range(200):
            store.save_run(_record(f"k{i}"))
    db = sqlite3.connect(path)
    page_size, root = (
        db.execute("PRAGMA page_size").fetchone()[0],
        db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0],
    )
    db.close()
    raw = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    raw[start : start + 64] = b"\xff" * 64  # scribble over the runs table's root page header
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match=rf"{re.escape(str(path))}.*(corrupt|malformed).*\.recover"):
        Store(path)
    check = run_cli("store", "check", str(path))
    assert check.returncode == 2 and str(path) in check.stderr and "Traceback" not in check.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_store_is_refused_before_anything_runs(tmp_path):
    suite = write_suite(tmp_path / "s.yaml", SUITE.format(name="ro", seeds="[0]"))
    path = tmp_path / "s.sqlite"
    Store(path).close()
    path.chmod(0o444)
    proc = run_cli("run", str(suite), "--store", str(path), "--no-report", env=OFFLINE)
    assert proc.returncode == 2 and "read-only" in proc.stderr and "chmod u+w" in proc.stderr
    assert "checking softmax" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_write_that_fails_after_compute_keeps_the_result_and_the_next_open_imports_it(tmp_path):
    path = tmp_path / "s.sqlite"
    store = Store(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the lock past the timeout
    store._db.execute("PRAGMA busy_timeout=50")
    with pytest.raises(StoreError, match=r"could not write the finished cell .*kept in .*unsaved.*run again"):
        store.save_run_or_set_aside(_record("k", summary={"val_loss": 1.25}))
    blocker.execute("ROLLBACK")
    blocker.close()
    store.close()
    assert len(sidefile.pending(path)) == 1
    with Store(path) as store:
        assert store.imported == ["k"] and store.runs()[0]["summary"] == {"val_loss": 1.25}
        assert [m["value"] for m in store.metrics(store.runs()[0]["id"])] == [2.0]
    assert sidefile.pending(path) == []


# -- strict JSON ---------------------------------------------------------------------


def test_non_finite_numbers_are_strict_json_in_the_store_and_floats_when_read(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        store.save_run(_record("k", summary={"val_loss": math.nan, "best": math.inf, "low": -math.inf}))
        summary = store.runs()[0]["summary"]
        assert math.isnan(summary["val_loss"]) and summary["best"] == math.inf and summary["low"] == -math.inf
    db = sqlite3.connect(path)
    assert db.execute("SELECT json_valid(summary), json_extract(summary, '$.best') FROM runs").fetchone() == (
        1,
        "Infinity",
    )
    raw = db.execute("SELECT summary FROM runs").fetchone()[0]
    json.loads(raw, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


# -- stores from several machines -----------------------------------------------------


def _report_md(store_path, suite):
    from attnbench.report import write_report

    text = (
        write_report(store_path, suite, out_dir=store_path.parent / f"rep-{suite}").parent / "report.md"
    ).read_text()
    # The store's path and the time of writing differ by construction; the rest must not.
    return "\n".join(line for line in text.splitlines() if ".sqlite" not in line and "generated" not in line.lower())


def test_two_machines_stores_merge_into_the_report_of_one_store(tmp_path):
    # One store that ran both suites (single); machine A's store ran alpha only; machine B's
    # holds the very same beta rows as single (single without alpha), so the numbers agree.
    single, a, b = tmp_path / "single.sqlite", tmp_path / "a" / "store.sqlite", tmp_path / "b" / "store.sqlite"
    a.parent.mkdir()
    b.parent.mkdir()
    for name, seeds, store in (("alpha", "[0]", a), ("beta", "[1]", single)):
        if store == single:
            shutil.copy(a, single)
        suite = write_suite(tmp_path / f"{name}.yaml", SUITE.format(name=name, seeds=seeds))
        proc = run_cli("run", str(suite), "--store", str(store), "--no-report", env=OFFLINE)
        assert proc.returncode == 0, proc.stderr[-2000:]
    shutil.copy(single, b)
    with Store(b) as store:
        store._db.execute("DELETE FROM runs WHERE suite = 'alpha'")
    before = {p: p.read_bytes() for p in (a, b)}
    merged = tmp_path / "merged" / "store.sqlite"
    proc = run_cli("store", "merge", str(merged), str(a), str(b))
    assert proc.returncode == 0 and "2 cells added" in proc.stdout, proc.stderr
    assert {p: p.read_bytes() for p in before} == before  # inputs never modified
    for suite in ("alpha", "beta"):
        assert _report_md(merged, suite) == _report_md(single, suite)
    again = run_cli("store", "merge", str(merged), str(a), str(b))
    assert again.returncode == 0 and "0 cells added, 2 already there, 0 in conflict" in again.stdout
    with Store(merged) as store:
        assert len(store.runs()) == 2 and store.attempts() == [] and store.checks()


def test_two_different_results_for_one_key_are_both_kept_and_flagged(tmp_path):
    with Store(tmp_path / "a.sqlite") as s:
        s.save_run(_record("k", summary={"val_loss": 1.0}, started=1.0))
    with Store(tmp_path / "b.sqlite") as s:
        s.save_run(_record("k", summary={"val_loss": 2.0}, started=2.0))
    report = merge_stores(tmp_path / "m.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    assert report.conflicts == ["k"]
    with Store(tmp_path / "m.sqlite") as s:
        assert s.runs()[0]["summary"] == {"val_loss": 1.0}
        [other] = s.attempts("k")
        assert other["summary"] == {"val_loss": 2.0} and other["reason"].startswith("conflict")
    again = merge_stores(tmp_path / "m.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    assert again.conflicts == [] and again.added == 0


def test_store_check_passes_a_healthy_store(tmp_path):
    Store(tmp_path / "s.sqlite").close()
    proc = run_cli("store", "check", str(tmp_path / "s.sqlite"))
    assert proc.returncode == 0 and "ok" in proc.stdout
