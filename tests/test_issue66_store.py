"""Issue 66, damaged stores and leases: a row whose JSON column cannot be decoded is skipped
and listed under Problems with its id (never a JSONDecodeError traceback); a lease row that
cannot be read counts as stale; a heartbeat far in the future (clock skew) does not make a
driver wait unbounded, and a waiting driver is told when a remote lease expires."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.store import leases
from attnbench.store.database import RunRecord, Store
from tests.helpers import run_cli
from tests.report_store import SUITE, write_store

DAMAGE = [
    ("summary", '{"val_loss": 2.1'),  # truncated
    ("config", ""),  # empty
    ("coords", "not json"),
    ("provenance", "[1, 2]"),  # JSON, not an object
]


def _damage(path: Path, sql: str, args: tuple[Any, ...] = ()) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(sql, args)
    db.close()


def _first_run_id(path: Path) -> int:
    db = sqlite3.connect(path)
    (row_id,) = db.execute("SELECT MIN(id) FROM runs WHERE suite = ?", (SUITE,)).fetchone()
    db.close()
    return int(row_id)


@pytest.mark.parametrize(("column", "text"), DAMAGE)
def test_a_run_row_with_a_damaged_json_column_is_skipped_and_listed(tmp_path: Path, column: str, text: str) -> None:
    path = write_store(tmp_path / "s.sqlite")
    bad = _first_run_id(path)
    _damage(path, f"UPDATE runs SET {column} = ? WHERE id = ?", (text, bad))
    data = load_store(path, SUITE)
    assert bad not in set(data.runs["id"]) and bad not in set(data.results["run_id"])
    report = build_report(data)
    (problem,) = [p for p in report.problems if p.kind == "damaged store row"]
    assert problem.where == f"runs row id {bad}" and column in problem.what
    with Store(path) as store:  # what run, lm_eval and finalizers read: the row skipped
        assert bad not in {r["id"] for r in store.runs(SUITE)}


def test_a_damaged_summary_reads_as_an_empty_outcome_for_the_planner(tmp_path: Path) -> None:
    path = write_store(tmp_path / "s.sqlite")
    bad = _first_run_id(path)
    _damage(path, "UPDATE runs SET summary = '{' WHERE id = ?", (bad,))
    with Store(path) as store:
        (key,) = [r[0] for r in store._db.execute("SELECT cell_key FROM runs WHERE id = ?", (bad,))]
        outcome = store.outcome(key)
    assert outcome is not None and outcome[1] == {}


def test_damaged_results_and_checks_rows_are_skipped_and_listed(tmp_path: Path) -> None:
    path = write_store(tmp_path / "s.sqlite")
    db = sqlite3.connect(path)
    (bad,) = db.execute("SELECT MIN(run_id) FROM results").fetchone()
    db.close()
    _damage(path, "UPDATE results SET tags = '{\"T\":' WHERE run_id = ?", (bad,))
    _damage(path, "UPDATE checks SET provenance = 'oops' WHERE variant = 'linear'")
    report = build_report(load_store(path, SUITE))
    wheres = sorted(p.where for p in report.problems if p.kind == "damaged store row")
    assert f"results row of run {bad}" in wheres and any(w.startswith("checks row id") for w in wheres)


def test_report_on_a_damaged_store_is_a_report_not_a_traceback(tmp_path: Path) -> None:
    path = write_store(tmp_path / "s.sqlite")
    _damage(path, "UPDATE runs SET summary = '{\"val_loss\": 2.1' WHERE id = ?", (_first_run_id(path),))
    proc = run_cli("report", "--store", str(path), "--suite", SUITE, "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "JSONDecodeError" not in proc.stderr
    assert "damaged store row" in (tmp_path / "r" / "report.md").read_text()


# -- leases --------------------------------------------------------------------------------------


def _record(key: str) -> RunRecord:
    return RunRecord(key, "s", "e", "train", "softmax", "done", 0, {}, {}, {}, {}, 0.0, 1.0)


def _foreign_lease(path: Path, key: str, **values: Any) -> None:
    """A held lease of ``key`` by a driver on another machine, with ``values`` set as given."""
    row = {"pid": 4242, "host": "elsewhere", "machine": "m", "process_start": "1", "started_at": time.time()}
    row |= {"heartbeat_at": time.time(), **values}
    cols = ", ".join(row)
    _damage(
        path, f"INSERT INTO leases (cell_key, {cols}) VALUES (?, {', '.join('?' * len(row))})", (key, *row.values())
    )


@pytest.mark.parametrize(
    "values",
    [
        {"heartbeat_at": "not a number"},
        {"heartbeat_at": ""},
        {"pid": "x"},
        {"pid": -1},
        {"started_at": "?"},
    ],
)
def test_an_unreadable_lease_row_is_stale_and_the_cell_is_taken_over(tmp_path: Path, values: dict) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    _foreign_lease(path, "k", **values)
    with Store(path) as store:
        if "started_at" in values:  # a live remote holder with an unreadable start: named, not a traceback
            holder = store.claim("k")
            assert isinstance(holder, leases.Holder) and "unknown time" in holder.text()
            return
        assert store.claim("k") == leases.CLAIMED
        ended = [lease for lease in store.leases("k") if lease["ending"] == "expired"]
        assert len(ended) == 1


def test_a_heartbeat_a_day_ahead_does_not_hold_the_cell(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    _foreign_lease(path, "k", heartbeat_at=time.time() + 86400)
    with Store(path) as store:
        assert store.claim("k") == leases.CLAIMED


def test_a_live_remote_lease_says_when_it_expires(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    beat = time.time() + 60  # a minute of skew: within the timeout, still a live holder
    _foreign_lease(path, "k", heartbeat_at=beat)
    with Store(path) as store:
        holder = store.claim("k")
    assert isinstance(holder, leases.Holder)
    expires = time.strftime("%H:%M:%S", time.localtime(beat + leases.LEASE_TIMEOUT_S))
    assert f"its lease expires at {expires} unless that driver renews it" in holder.text()
