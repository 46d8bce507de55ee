"""The results store: pinned schema, atomic cells, refusing non-SQLite files."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
from pathlib import Path

import pytest

from attnbench.errors import StoreError
from attnbench.store.database import Metric, Result, RunRecord, Store

PINNED_SCHEMA = [
    "CREATE INDEX attempts_cell ON attempts (cell_key, started_at)",
    "CREATE INDEX checks_variant ON checks (variant, created_at)",
    "CREATE INDEX leases_cell ON leases (cell_key, started_at)",
    "CREATE UNIQUE INDEX leases_held ON leases (cell_key) WHERE ended_at IS NULL",
    "CREATE INDEX metrics_run ON metrics (run_id, name, step)",
    "CREATE INDEX results_run ON results (run_id, name)",
    "CREATE INDEX runs_suite ON runs (suite, experiment, variant)",
    (
        "CREATE TABLE attempts ( id INTEGER PRIMARY KEY, cell_key TEXT NOT NULL, reason TEXT NOT NULL, "
        "status TEXT NOT NULL, error TEXT, summary TEXT NOT NULL, provenance TEXT NOT NULL, "
        "started_at REAL NOT NULL, finished_at REAL NOT NULL, recorded_at REAL NOT NULL )"
    ),
    (
        "CREATE TABLE checks ( gate_key TEXT NOT NULL, variant TEXT NOT NULL, check_name TEXT NOT NULL, "
        "status TEXT NOT NULL, figure REAL, tolerance REAL, detail TEXT NOT NULL, provenance TEXT NOT NULL, "
        "created_at REAL NOT NULL, PRIMARY KEY (gate_key, check_name) )"
    ),
    (
        "CREATE TABLE leases ( id INTEGER PRIMARY KEY, cell_key TEXT NOT NULL, pid INTEGER NOT NULL, "
        "host TEXT NOT NULL, machine TEXT NOT NULL, process_start TEXT NOT NULL, started_at REAL NOT NULL, "
        "heartbeat_at REAL NOT NULL, ended_at REAL, ending TEXT )"
    ),
    (
        "CREATE TABLE metrics ( run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, "
        "step INTEGER NOT NULL, tokens INTEGER NOT NULL, elapsed_s REAL NOT NULL, name TEXT NOT NULL, "
        "value REAL )"
    ),
    (
        "CREATE TABLE results ( run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, "
        "name TEXT NOT NULL, value REAL, unit TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '{}' )"
    ),
    (
        "CREATE TABLE runs ( id INTEGER PRIMARY KEY, cell_key TEXT NOT NULL UNIQUE, suite TEXT NOT NULL, "
        "experiment TEXT NOT NULL, kind TEXT NOT NULL, variant TEXT NOT NULL, status TEXT NOT NULL, "
        "seed INTEGER, coords TEXT NOT NULL, config TEXT NOT NULL, provenance TEXT NOT NULL, "
        "summary TEXT NOT NULL, error TEXT, started_at REAL NOT NULL, finished_at REAL NOT NULL )"
    ),
    "CREATE TABLE schema_migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at REAL NOT NULL)",
]


def _run(key: str, n_metrics: int = 3) -> RunRecord:
    return RunRecord(
        cell_key=key,
        suite="s",
        experiment="e",
        kind="train",
        variant="softmax",
        status="done",
        seed=0,
        coords={"lr": 1e-3},
        config={"a": 1},
        provenance={"git": {"commit": "abc"}},
        summary={"val_loss": 1.5},
        started_at=0.0,
        finished_at=1.0,
        metrics=[Metric(i, i * 10, 0.1 * i, "train/loss", 2.0 - i / 10) for i in range(n_metrics)],
        results=[Result("loss", 1.5, "nats", {"split": "val"})],
    )


def test_schema_is_pinned(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        assert store.schema() == PINNED_SCHEMA


def test_run_round_trip_and_duplicate_key_is_a_no_op(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        run_id = store.save_run(_run("k1"))
        assert (
            run_id is not None and store.save_run(_run("k1")) is None
        )  # a second writer of the same cell stores nothing
        [row] = store.runs()
        assert row["id"] == run_id and row["coords"] == {"lr": 1e-3}
        assert row["provenance"]["git"]["commit"] == "abc"
        assert [m["value"] for m in store.metrics(run_id, "train/loss")] == [2.0, 1.9, 1.8]
        assert store.results(run_id)[0]["tags"] == {"split": "val"}
        assert store.has_run("k1") and not store.has_run("k2")


def test_an_attempt_kept_as_it_happened_is_kept_once_when_its_cell_is_retried(tmp_path):
    died = _run("k1")
    died.status, died.error, died.metrics, died.results = "failed", "the worker process ... died (SIGKILL)", [], []
    with Store(tmp_path / "s.sqlite") as store:
        store.save_attempt(died, "worker died")  # as the worker died
        store.save_run(died)  # its cell's outcome: no retries left
        store.save_run(_run("k1"))  # a later run retries it
        assert [(a["reason"], a["error"]) for a in store.attempts("k1")] == [("worker died", died.error)]
        assert [r["status"] for r in store.runs()] == ["done"]


def test_failed_write_leaves_nothing(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        bad = _run("k1")
        # None where the schema says NOT NULL, on purpose: the write must fail mid-transaction
        bad.metrics.append(Metric(99, 0, 0.0, None, 1.0))  # pyright: ignore[reportArgumentType]
        with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
            store.save_run(bad)
        assert store.runs() == [] and not store.has_run("k1")


def test_reopen_keeps_rows_and_wal_mode(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        store.save_run(_run("k1"))
    with Store(path) as store:
        assert len(store.runs()) == 1
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_not_a_sqlite_file_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my precious notes\n")
    with pytest.raises(StoreError, match="is not a SQLite database"):
        Store(path)
    assert path.read_text() == "my precious notes\n"


def test_store_from_unknown_future_migration_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        store._db.execute("INSERT INTO schema_migrations (name, applied_at) VALUES ('9999_future', 0)")
    with pytest.raises(StoreError, match="newer or different version"):
        Store(path)


class _BusyAtFirst(sqlite3.Connection):
    """A connection whose first two switches to WAL find the file locked, as when another
    process opens it at the same moment (SQLite then answers at once, without waiting)."""

    busy = 2

    def execute(self, sql, *args):
        if sql == "PRAGMA journal_mode=WAL" and _BusyAtFirst.busy:
            _BusyAtFirst.busy -= 1
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = 5  # SQLITE_BUSY, as sqlite3 sets it  # pyright: ignore[reportAttributeAccessIssue]
            raise exc
        return super().execute(sql, *args)


def test_a_store_that_another_process_is_switching_to_wal_opens(tmp_path, monkeypatch):
    monkeypatch.setattr(_BusyAtFirst, "busy", 2)
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: connect(*a, **kw, factory=_BusyAtFirst))
    with Store(tmp_path / "s.sqlite") as store:
        assert _BusyAtFirst.busy == 0 and store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


OPENERS, FRESH_STORES = 4, 50


def _open_each(folder: str, barrier, errors) -> None:
    """One of OPENERS processes: open each store at the same moment as the others."""
    for i in range(FRESH_STORES):
        barrier.wait(timeout=60)
        try:
            Store(Path(folder) / f"{i}.sqlite").close()
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            errors.put(f"store {i}: {type(exc).__name__}: {exc}")


def test_a_fresh_store_opened_by_several_processes_at_once_opens_in_each(tmp_path):
    # Fresh stores not yet in WAL mode (as a copy made with VACUUM INTO is): the opener that
    # switches one to WAL races the others, which SQLite answered with "database is locked".
    Store(tmp_path / "new.sqlite").close()
    with sqlite3.connect(tmp_path / "new.sqlite") as db:
        db.execute("VACUUM INTO ?", (str(tmp_path / "copy.sqlite"),))
    for i in range(FRESH_STORES):
        shutil.copy(tmp_path / "copy.sqlite", tmp_path / f"{i}.sqlite")
    ctx = multiprocessing.get_context("fork")  # the children use only sqlite3, never torch
    barrier, errors = ctx.Barrier(OPENERS), ctx.SimpleQueue()
    procs = [ctx.Process(target=_open_each, args=(str(tmp_path), barrier, errors)) for _ in range(OPENERS)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == [] and [proc.exitcode for proc in procs] == [0] * OPENERS
    with Store(tmp_path / f"{FRESH_STORES - 1}.sqlite") as store:
        assert store.migrations() and store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
