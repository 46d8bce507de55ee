"""Reading a results store, read-only, into pandas DataFrames for one suite.

The store file is opened with SQLite's ``mode=ro`` (writes are refused by SQLite itself),
so a report can be made while a suite is still running. Like any SQLite reader of a WAL
database, the connection may leave the shared-memory side files (``-wal``, ``-shm``)
beside the store; the store file itself is never written. On read-only media (where those
files cannot be created and no writer can be active) the file is read as immutable.
"""

from __future__ import annotations

import difflib
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.errors import ReportError
from attnbench.store import jsonsafe

_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = ("runs", "metrics", "results", "checks")
_JSON_RUN_COLUMNS = ("coords", "config", "provenance", "summary")


@dataclass(frozen=True)
class StoreData:
    """One suite's rows of a store.

    runs: one row per run (cells and derived fits); ``coords``, ``config``, ``provenance``
        and ``summary`` hold decoded JSON (dicts).
    metrics: run_id, step, tokens, elapsed_s, name, value (curves of the suite's runs).
    results: run_id, name, value, unit, tags (decoded dict).
    checks: trust-gate verdicts (gate_key, variant, check_name, status, figure, tolerance,
        detail, created_at, provenance) of every variant in the store.
    all_variants: every variant name in the store (keys the colour palette, so a variant
        has one colour in every report of the store).
    Read rows of some runs through ``results_of`` / ``metrics_of``, never by hand.
    """

    path: Path
    suite: str | None
    suites: list[str]
    runs: pd.DataFrame
    metrics: pd.DataFrame
    results: pd.DataFrame
    checks: pd.DataFrame
    migrations: list[str]
    all_variants: list[str]
    # Earlier attempts at the suite's cells (retried failures, conflicting merged results).
    attempts: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Rows skipped because a JSON column could not be decoded: (table, row id, what was wrong).
    damaged: list[tuple[str, int, str]] = field(default_factory=list)

    def runs_of(self, kind: str) -> pd.DataFrame:
        return self.runs[self.runs["kind"] == kind]

    def kinds(self) -> set[str]:
        return set(self.runs["kind"])

    def results_of(
        self, run_ids: Iterable[Any], name: str | Iterable[str] | None = None, split: str | None = None
    ) -> pd.DataFrame:
        """The result rows of ``run_ids`` in store order, of one metric ``name`` or any of
        several, on one evaluation ``split`` (a row whose tags name none is "val")."""
        rows = _rows_of(self.results, run_ids, name)
        if split is None:
            return rows
        return rows[pd.Series([t.get("split", "val") == split for t in rows["tags"]], index=rows.index, dtype=bool)]

    def metrics_of(self, run_ids: Iterable[Any], name: str | Iterable[str] | None = None) -> pd.DataFrame:
        """The curve points of ``run_ids`` (by run, name and step), of one ``name`` or any of several."""
        return _rows_of(self.metrics, run_ids, name)


def _rows_of(frame: pd.DataFrame, run_ids: Iterable[Any], name: str | Iterable[str] | None) -> pd.DataFrame:
    keep = frame["run_id"].isin(list(run_ids))
    if name is not None:
        keep &= frame["name"] == name if isinstance(name, str) else frame["name"].isin(list(name))
    return frame[keep]


def _connect(path: Path) -> sqlite3.Connection:
    uri = path.resolve().as_uri()
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True)
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        if Path(f"{path}-wal").exists():  # a writer may be active: never read it as immutable
            raise
        db = sqlite3.connect(f"{uri}?immutable=1", uri=True)
    db.row_factory = sqlite3.Row
    return db


def _open(path: Path) -> sqlite3.Connection:
    """The store at ``path``, opened read-only; ReportError where it is missing or no SQLite file."""
    if not path.exists():
        raise ReportError(
            f"no results store at {path}: run a suite first (attnbench run suites/smoke.yaml) "
            "or pass the store with --store PATH"
        )
    if path.is_dir():
        raise ReportError(f"{path} is a directory, not a results store; pass the SQLite file with --store")
    with open(path, "rb") as f:
        head = f.read(16)
    if head != _SQLITE_MAGIC:
        raise ReportError(f"{path} is not a results store (not a SQLite database); pass another --store")
    try:
        return _connect(path)
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"cannot open results store {path} read-only: {exc}") from exc


def _frame(db: sqlite3.Connection, sql: str, args: tuple[Any, ...] = ()) -> pd.DataFrame:
    cur = db.execute(sql, args)
    columns = [d[0] for d in cur.description]
    return pd.DataFrame([tuple(r) for r in cur.fetchall()], columns=columns)


def _decode(
    frame: pd.DataFrame, columns: tuple[str, ...], table: str, damaged: list[tuple[str, int, str]]
) -> pd.DataFrame:
    """``frame`` with ``columns`` decoded; a row whose column is damaged (not a JSON object) is
    dropped and noted in ``damaged`` as (table, its id, the columns), for Problems."""
    bad: dict[Any, list[str]] = {}
    for col in columns:
        decoded = [jsonsafe.loads_object(v) for v in frame[col]]
        for idx, value in zip(frame.index, decoded, strict=True):
            if value is None:
                bad.setdefault(idx, []).append(col)
        frame[col] = pd.Series([v or {} for v in decoded], index=frame.index, dtype=object)
    ids = frame["id" if "id" in frame.columns else "run_id"]
    for idx, cols in bad.items():
        damaged.append((table, int(ids[idx]), f"{', '.join(cols)} not readable as a JSON object"))
    return frame.drop(index=list(bad)) if bad else frame


def _suite_of(db: sqlite3.Connection, path: Path, suite: str | None, suites: list[str]) -> str | None:
    """``suite``, or the suite of the most recently finished run; ReportError for one not in the store."""
    if suite is None and suites:
        suite = db.execute("SELECT suite FROM runs ORDER BY finished_at DESC, id DESC LIMIT 1").fetchone()[0]
    if suite is not None and suites and suite not in suites:
        close = difflib.get_close_matches(suite, suites, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ReportError(
            f"suite {suite!r} has no runs in {path}{hint}; suites in this store: "
            f"{', '.join(suites)} (pass one with --suite)"
        )
    return suite


def _read(db: sqlite3.Connection, path: Path, suite: str | None) -> StoreData:
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in _TABLES if t not in names]
    if missing:
        raise ReportError(
            f"{path} is a SQLite database but not an attnbench results store "
            f"(no tables {missing}); pass another --store"
        )
    migrations = (
        [r[0] for r in db.execute("SELECT name FROM schema_migrations ORDER BY id")]
        if "schema_migrations" in names
        else []
    )
    suites = [r[0] for r in db.execute("SELECT DISTINCT suite FROM runs ORDER BY suite")]
    suite = _suite_of(db, path, suite, suites)
    args, ids = (suite,), "SELECT id FROM runs WHERE suite = ?"
    damaged: list[tuple[str, int, str]] = []
    runs = _frame(db, "SELECT * FROM runs WHERE suite = ? ORDER BY id", args)
    runs = _decode(runs, _JSON_RUN_COLUMNS, "runs", damaged)
    metrics = _frame(db, f"SELECT * FROM metrics WHERE run_id IN ({ids}) ORDER BY run_id, name, step", args)
    results = _frame(db, f"SELECT * FROM results WHERE run_id IN ({ids}) ORDER BY run_id, rowid", args)
    results = _decode(results, ("tags",), "results", damaged)
    checks = _frame(db, "SELECT rowid AS id, * FROM checks ORDER BY variant, created_at")
    checks = _decode(checks, ("provenance",), "checks", damaged).drop(columns="id")
    attempts = pd.DataFrame()
    if "attempts" in names:
        sql = "SELECT * FROM attempts WHERE cell_key IN (SELECT cell_key FROM runs WHERE suite = ?)"
        attempts = _frame(db, f"{sql} ORDER BY started_at, id", args)
    all_variants = sorted({r[0] for r in db.execute("SELECT variant FROM runs UNION SELECT variant FROM checks")})
    kept = set(runs["id"]) if "id" in runs else set()  # rows of runs skipped as damaged: dropped
    metrics = metrics[metrics["run_id"].isin(kept)] if "run_id" in metrics else metrics
    results = results[results["run_id"].isin(kept)] if "run_id" in results else results
    return StoreData(path, suite, suites, runs, metrics, results, checks, migrations, all_variants, attempts, damaged)


def load_store(path: Path, suite: str | None) -> StoreData:
    """The rows of ``suite`` (default: the suite of the most recently finished run).

    Raises ReportError when ``path`` is missing or not a store, or when ``suite`` is not
    in a non-empty store (the message lists the suites it has). An empty store loads as
    empty frames (the report then says what is missing)."""
    path = Path(path)
    db = _open(path)
    try:
        return _read(db, path, suite)
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"cannot read results store {path}: {exc}") from exc
    finally:
        db.close()
