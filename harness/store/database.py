"""The results store: one SQLite file (WAL), named ordered migrations, provenance on
every run. A cell's rows are written in a single transaction, so a killed process leaves
either the whole cell or nothing, and two processes finishing the same cell store it once.
Opening checks that the file is an intact, writable store before any compute is spent; a
failed cell's row is replaced by its retry, the old attempt kept in ``attempts``. A driver
claims a cell (a lease, ``attnbench.store.leases``) before training it, so two drivers on
one store do not train the same cell.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnbench.errors import StoreError
from attnbench.store import jsonsafe, sidefile
from attnbench.store import leases as leases_
from attnbench.store.records import Metric, Result, RunRecord
from attnbench.store.schema import migrate

__all__ = ["Metric", "Result", "RunRecord", "Store", "DEFAULT_STORE", "RETRYABLE"]

DEFAULT_STORE = Path("results") / "attnbench.sqlite"
_SQLITE_MAGIC = b"SQLite format 3\x00"
# Statuses that are not results: the next run tries the cell again (a diverged run is a result).
RETRYABLE = ("failed",)
_RECOVER = (
    "restore it from a backup, or salvage it with `sqlite3 {p} .recover | sqlite3 {p}.recovered`, "
    "or pass another --store"
)


_dumps = jsonsafe.dumps
_LOCK_WAIT_S = 60.0  # how long opening waits for other processes' locks (busy_timeout too)
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says another connection holds a lock (error codes are on it from Python 3.11)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (_SQLITE_BUSY, _SQLITE_LOCKED) if code is not None else "database is locked" in str(exc)


class Store:
    """A results store at ``path`` (created with its folder if missing)."""

    def __init__(self, path: str | Path = DEFAULT_STORE) -> None:
        self.path = Path(path)
        self._owner: leases_.Owner | None = None  # this process, once it claims a cell
        self._heartbeat: leases_.Heartbeat | None = None
        self._check_is_sqlite()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._check_writable()
        try:
            self._db = sqlite3.connect(self.path, timeout=_LOCK_WAIT_S, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA busy_timeout={int(_LOCK_WAIT_S * 1000)}")
            self._use_wal()
            self._db.execute("PRAGMA foreign_keys=ON")
            self._check_intact()
            with self._write() as db:
                migrate(db, self.path)
            self.imported = self._import_set_aside()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open results store {self.path}: {exc}; " + _RECOVER.format(p=self.path)) from exc

    def _use_wal(self) -> None:
        """WAL mode. Switching a file to it can answer "database is locked" at once, without
        waiting out busy_timeout, while another process opens the same file: retry, backing off."""
        delay, deadline = 0.005, time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"results store {self.path} stayed locked by another process for "
                        f"{_LOCK_WAIT_S:.0f} s while opening; run again once it is done, or pass another --store"
                    ) from exc
            time.sleep(delay)
            delay = min(2 * delay, 0.5)

    def _check_is_sqlite(self) -> None:
        if not self.path.exists():
            return
        if self.path.is_dir():
            raise StoreError(f"results store {self.path} is a directory; pass a file path with --store")
        with open(self.path, "rb") as f:
            head = f.read(16)
        if head and head != _SQLITE_MAGIC:
            raise StoreError(
                f"{self.path} is not a SQLite database (it starts with {head[:8]!r}); "
                "nothing was written to it. Pass another path with --store, or move the file away."
            )

    def _check_writable(self) -> None:
        """WAL mode writes the file and two side files beside it: all must be writable."""
        folder = self.path.parent
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise StoreError(
                f"results store {self.path} is read-only; nothing was run. Make it "
                f"writable (chmod u+w {self.path}) or pass another --store"
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(
                f"the folder {folder} of results store {self.path} is not writable "
                f"(SQLite keeps its -wal and -shm files there); nothing was run. Make it "
                f"writable (chmod u+w {folder}) or pass another --store"
            )

    def _check_intact(self) -> None:
        """SQLite's quick_check (pages and indexes, without the slow cross-checks)."""
        problems = [r[0] for r in self._db.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise StoreError(
                f"results store {self.path} is corrupt ({'; '.join(problems)}); nothing was "
                "run. " + _RECOVER.format(p=self.path).capitalize()
            )

    def close(self) -> None:
        """Close; leases this process still holds (cells it claimed and did not store) end first."""
        if self._owner is not None:
            with contextlib.suppress(sqlite3.Error):  # else they expire: this process is going
                self.release()
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all of it is stored, or none of it."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            # After some errors (disk full, out of memory) SQLite has already rolled back; a
            # second ROLLBACK would fail and hide the error that matters.
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def schema(self) -> list[str]:
        """The schema's SQL, for pinning in tests."""
        rows = self._db.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name")
        return [" ".join(r["sql"].split()) for r in rows]

    def migrations(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM schema_migrations ORDER BY id")]

    # -- runs ---------------------------------------------------------------------------
    def has_run(self, cell_key: str) -> bool:
        row = self._db.execute("SELECT 1 FROM runs WHERE cell_key = ?", (cell_key,)).fetchone()
        return row is not None

    def settled(self, cell_key: str, retry_failed: bool = True) -> bool:
        """Whether a cell needs no run: stored, and not a failed attempt to be retried."""
        row = self._db.execute("SELECT status FROM runs WHERE cell_key = ?", (cell_key,)).fetchone()
        return row is not None and not (retry_failed and row["status"] in RETRYABLE)

    def outcome(self, cell_key: str) -> tuple[str, dict[str, Any]] | None:
        """A stored cell's status and summary; None when the key is not stored."""
        row = self._db.execute("SELECT status, summary FROM runs WHERE cell_key = ?", (cell_key,)).fetchone()
        return None if row is None else (row["status"], jsonsafe.loads_object(row["summary"]) or {})  # damaged: {}

    def save_run(self, run: RunRecord) -> int | None:
        """Store a cell with its metrics and results atomically; None if already stored.
        A stored failed attempt is replaced, and kept in ``attempts``."""
        with self._write() as db:
            old = db.execute("SELECT * FROM runs WHERE cell_key = ?", (run.cell_key,)).fetchone()
            if self._owner is not None:  # the cell's lease ends with its rows stored
                leases_.end(db, self._owner, "stored", run.cell_key)
            if old is not None and old["status"] not in RETRYABLE:
                return None  # another driver stored this cell first
            if old is not None:
                if not _kept(db, old):  # a worker's death was kept as it happened
                    _keep_attempt(db, old, "retried")
                db.execute("DELETE FROM runs WHERE id = ?", (old["id"],))
            return _insert_run(db, run)

    def save_run_or_set_aside(self, run: RunRecord) -> int | None:
        """``save_run``; if the write fails, the result is kept in a side file and the error
        says where (the next open of the store imports it)."""
        return sidefile.save_or_set_aside(self, run)

    def save_attempt(self, run: RunRecord, reason: str) -> None:
        """Keep an attempt at a cell that left no result (a worker died running it)."""
        row = {
            "cell_key": run.cell_key,
            "status": run.status,
            "error": run.error,
            "summary": _dumps(run.summary),
            "provenance": _dumps(run.provenance),
            "started_at": run.started_at,
            "finished_at": run.finished_at,
        }
        try:
            with self._write() as db:
                _keep_attempt(db, row, reason)
        except sqlite3.Error as exc:
            raise StoreError(
                f"could not keep an attempt at {run.experiment}/{run.variant} ({reason}: {run.error}) in "
                f"results store {self.path} ({exc}); nothing stored was changed. Free disk space (or fix "
                "the file's permissions, or end the process holding its lock) and run again."
            ) from exc

    def _import_set_aside(self) -> list[str]:
        """Store results that an earlier run could not write; each file goes once stored."""
        return sidefile.import_pending(self)

    def attempts(self, cell_key: str | None = None) -> list[dict[str, Any]]:
        """Earlier attempts (retried failures, results a merge found in conflict), oldest first."""
        sql, args = "SELECT * FROM attempts", ()
        if cell_key is not None:
            sql, args = sql + " WHERE cell_key = ?", (cell_key,)
        rows = self._db.execute(sql + " ORDER BY started_at, id", args)
        decoded = (jsonsafe.decoded(dict(r), ("summary", "provenance")) for r in rows)
        return [d for d in decoded if d is not None]

    def runs(self, suite: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if suite is not None:
            sql, args = sql + " AND suite = ?", args + [suite]
        if kind is not None:
            sql, args = sql + " AND kind = ?", args + [kind]
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        decoded = (jsonsafe.decoded(dict(r), ("coords", "config", "provenance", "summary")) for r in rows)
        return [d for d in decoded if d is not None]  # a damaged row is skipped (the report lists it)

    def metrics(self, run_id: int, name: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM metrics WHERE run_id = ?", [run_id]
        if name is not None:
            sql, args = sql + " AND name = ?", args + [name]
        return [dict(r) for r in self._db.execute(sql + " ORDER BY step", args)]

    def results(self, run_id: int) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT * FROM results WHERE run_id = ? ORDER BY rowid", (run_id,))
        return [d for r in rows if (d := jsonsafe.decoded(dict(r), ("tags",))) is not None]

    def suites(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT suite FROM runs ORDER BY suite")]

    # -- leases -------------------------------------------------------------------------
    def claim(self, cell_key: str, retry_failed: bool = True, since: float | None = None) -> str | leases_.Holder:
        """Claim ``cell_key`` for this process before training it (``attnbench.store.leases``).
        ``leases.STORED`` when the cell needs no run: stored and not a failure to retry, or
        stored since ``since`` (this run's start: by another driver, failed or not);
        ``leases.CLAIMED`` once this process holds its lease; else the live ``Holder``."""
        owner = self._owner = self._owner or leases_.me()
        with self._write() as db:
            row = db.execute("SELECT status, finished_at FROM runs WHERE cell_key = ?", (cell_key,)).fetchone()
            settled = row is not None and (
                not (retry_failed and row["status"] in RETRYABLE) or (since is not None and row["finished_at"] >= since)
            )
            got = leases_.claim(db, cell_key, owner, settled=settled)
        if got == leases_.CLAIMED:
            self._beat()
        return got

    def release(self, cell_key: str | None = None, ending: str = "released") -> None:
        """End this process's lease of ``cell_key`` (None: every lease it holds) without storing the cell."""
        if self._owner is None:
            return
        with self._write() as db:
            leases_.end(db, self._owner, ending, cell_key)

    def leases(self, cell_key: str | None = None) -> list[dict[str, Any]]:
        """Every lease taken (held ones have ``ended_at`` None), oldest first: who trained which cell."""
        return leases_.taken(self._db, cell_key)

    def _beat(self) -> None:
        """Renew this process's leases in the background (``leases.Heartbeat``)."""
        if self._heartbeat is None and self._owner is not None:
            self._heartbeat = leases_.Heartbeat(self.path, self._owner, _LOCK_WAIT_S)

    # -- trust gate ---------------------------------------------------------------------
    def save_checks(self, gate_key: str, variant: str, results: list[Any], provenance: dict[str, Any]) -> None:
        """Store one variant's check verdicts (``attnbench.gate.checks.CheckResult``-like rows)."""
        now = time.time()
        try:
            with self._write() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO checks (gate_key, variant, check_name, status, figure, "
                    "tolerance, detail, provenance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (gate_key, variant, r.check, r.status, r.figure, r.tolerance, r.detail, _dumps(provenance), now)
                        for r in results
                    ],
                )
        except sqlite3.Error as exc:
            raise StoreError(
                f"could not store the trust gate's verdicts for {variant} in results store "
                f"{self.path} ({exc}); nothing stored was changed (the write was rolled "
                "back). Free disk space (or fix the file's permissions, or end the process "
                "holding its lock) and run again, or pass another --store."
            ) from exc

    def checks(self, gate_key: str | None = None, variant: str | None = None) -> list[dict[str, Any]]:
        """Verdicts for one gate key, or the latest verdicts of a variant (or of all)."""
        if gate_key is not None:
            rows = self._db.execute("SELECT * FROM checks WHERE gate_key = ?", (gate_key,))
        else:
            sql = (
                "SELECT c.* FROM checks c JOIN (SELECT variant, gate_key, MAX(created_at) AS t "
                "FROM checks GROUP BY variant) latest ON c.variant = latest.variant "
                "AND c.gate_key = latest.gate_key"
            )
            args: list[Any] = []
            if variant is not None:
                sql, args = sql + " WHERE c.variant = ?", [variant]
            rows = self._db.execute(sql, args)
        return [d for r in rows if (d := jsonsafe.decoded(dict(r), ("provenance",))) is not None]


def _insert_run(db: sqlite3.Connection, run: RunRecord) -> int:
    cur = db.execute(
        "INSERT INTO runs (cell_key, suite, experiment, kind, variant, status, seed, "
        "coords, config, provenance, summary, error, started_at, finished_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run.cell_key,
            run.suite,
            run.experiment,
            run.kind,
            run.variant,
            run.status,
            run.seed,
            _dumps(run.coords),
            _dumps(run.config),
            _dumps(run.provenance),
            _dumps(run.summary),
            run.error,
            run.started_at,
            run.finished_at,
        ),
    )
    run_id = cur.lastrowid
    if run_id is None:  # an INSERT always sets it
        raise sqlite3.DatabaseError("the runs row was not inserted")
    db.executemany(
        "INSERT INTO metrics (run_id, step, tokens, elapsed_s, name, value) VALUES (?, ?, ?, ?, ?, ?)",
        [(run_id, m.step, m.tokens, m.elapsed_s, m.name, m.value) for m in run.metrics],
    )
    db.executemany(
        "INSERT INTO results (run_id, name, value, unit, tags) VALUES (?, ?, ?, ?, ?)",
        [(run_id, r.name, r.value, r.unit, _dumps(r.tags)) for r in run.results],
    )
    return run_id


def _kept(db: sqlite3.Connection, row: Any) -> bool:
    """Whether ``row``'s attempt is already in ``attempts``."""
    found = db.execute(
        "SELECT 1 FROM attempts WHERE cell_key = ? AND started_at = ? AND error IS ?",
        (row["cell_key"], row["started_at"], row["error"]),
    ).fetchone()
    return found is not None


def _keep_attempt(db: sqlite3.Connection, row: Any, reason: str) -> None:
    db.execute(
        "INSERT INTO attempts (cell_key, reason, status, error, summary, provenance, started_at, "
        "finished_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row["cell_key"],
            reason,
            row["status"],
            row["error"],
            row["summary"],
            row["provenance"],
            row["started_at"],
            row["finished_at"],
            time.time(),
        ),
    )
