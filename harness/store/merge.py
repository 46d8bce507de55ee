"""Joining stores written on different machines into one: cells deduplicated by key,
two different results for one key both kept (the second as a flagged attempt), curves,
results, gate verdicts and attempt history carried over. Inputs are opened read-only."""

from __future__ import annotations

import os
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.errors import StoreError
from attnbench.store.database import RETRYABLE, Store
from attnbench.store.schema import MIGRATIONS

_SQLITE_MAGIC = b"SQLite format 3\x00"
_RUN_COLUMNS = (
    "cell_key",
    "suite",
    "experiment",
    "kind",
    "variant",
    "status",
    "seed",
    "coords",
    "config",
    "provenance",
    "summary",
    "error",
    "started_at",
    "finished_at",
)
_SAME = ("status", "summary", "error", "started_at", "finished_at")  # one attempt, seen twice


@dataclass
class MergeReport:
    added: int = 0
    duplicates: int = 0  # the same result already in OUT
    conflicts: list[str] = field(default_factory=list)  # cell keys with two different results
    attempts: int = 0
    checks: int = 0


def _open_input(path: Path, verify: bool = True) -> sqlite3.Connection:
    if not path.is_file():
        raise StoreError(f"store to merge {path} not found; pass existing store files")
    with open(path, "rb") as f:
        if f.read(16) != _SQLITE_MAGIC:
            raise StoreError(f"{path} is not a results store (not a SQLite database); remove it from the inputs")
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"runs", "metrics", "results", "checks"} <= tables:
        db.close()
        raise StoreError(f"{path} is a SQLite database but not an attnbench results store; remove it from the inputs")
    problems = [r[0] for r in db.execute("PRAGMA quick_check(5)")] if verify else ["ok"]
    if problems != ["ok"]:
        db.close()
        raise StoreError(f"{path} is corrupt ({'; '.join(problems)}); run `attnbench store check {path}`")
    return db


def _same(a: sqlite3.Row, b: sqlite3.Row) -> bool:
    return all(a[c] == b[c] for c in _SAME)


def _add_attempt(out: sqlite3.Connection, row: sqlite3.Row, reason: str) -> bool:
    """Keep ``row`` as an attempt unless that very attempt is already kept."""
    for old in out.execute("SELECT * FROM attempts WHERE cell_key = ?", (row["cell_key"],)):
        if _same(old, row):
            return False
    out.execute(
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
            row["finished_at"],
        ),
    )
    return True


def _copy_run(out: sqlite3.Connection, src: sqlite3.Connection, row: sqlite3.Row) -> None:
    cur = out.execute(
        f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' * len(_RUN_COLUMNS))})",
        [row[c] for c in _RUN_COLUMNS],
    )
    new_id = cur.lastrowid
    out.executemany(
        "INSERT INTO metrics (run_id, step, tokens, elapsed_s, name, value) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (new_id, m["step"], m["tokens"], m["elapsed_s"], m["name"], m["value"])
            for m in src.execute("SELECT * FROM metrics WHERE run_id = ? ORDER BY rowid", (row["id"],))
        ],
    )
    out.executemany(
        "INSERT INTO results (run_id, name, value, unit, tags) VALUES (?, ?, ?, ?, ?)",
        [
            (new_id, r["name"], r["value"], r["unit"], r["tags"])
            for r in src.execute("SELECT * FROM results WHERE run_id = ? ORDER BY rowid", (row["id"],))
        ],
    )


def _merge_runs(out: sqlite3.Connection, src: sqlite3.Connection, label: str, report: MergeReport) -> None:
    for row in src.execute("SELECT * FROM runs ORDER BY id").fetchall():
        kept = out.execute("SELECT * FROM runs WHERE cell_key = ?", (row["cell_key"],)).fetchone()
        if kept is None:
            _copy_run(out, src, row)
            report.added += 1
        elif _same(kept, row):
            report.duplicates += 1
        elif kept["status"] in RETRYABLE and row["status"] not in RETRYABLE:
            _add_attempt(out, kept, "retried")  # the input finished what OUT has as failed
            out.execute("DELETE FROM runs WHERE id = ?", (kept["id"],))
            _copy_run(out, src, row)
            report.added += 1
        elif _add_attempt(out, row, f"conflict: a second result for this cell, from {label}"):
            report.conflicts.append(row["cell_key"])
        else:
            report.duplicates += 1


def _merge_all(out: sqlite3.Connection, sources: list[tuple[sqlite3.Connection, str]], report: MergeReport) -> None:
    for src, label in sources:
        _merge_runs(out, src, label, report)
        tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for row in src.execute("SELECT * FROM attempts ORDER BY id").fetchall() if "attempts" in tables else []:
            report.attempts += _add_attempt(out, row, row["reason"])
        for c in src.execute("SELECT * FROM checks").fetchall():
            cur = out.execute(
                "INSERT OR IGNORE INTO checks (gate_key, variant, check_name, status, figure, "
                "tolerance, detail, provenance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                tuple(
                    c[k]
                    for k in (
                        "gate_key",
                        "variant",
                        "check_name",
                        "status",
                        "figure",
                        "tolerance",
                        "detail",
                        "provenance",
                        "created_at",
                    )
                ),
            )
            report.checks += cur.rowcount


def merge_stores(out_path: Path, inputs: list[Path]) -> MergeReport:
    """Merge ``inputs`` into the store at ``out_path``, all or nothing: an existing store in
    one transaction; a new one built in a temporary file beside it, renamed into place when whole."""
    out_path = Path(out_path)
    for path in inputs:
        if Path(path).resolve() == out_path.resolve():
            raise StoreError(f"{path} is both the output and an input; merge into a new file")
    sources = [(_open_input(Path(p)), str(p)) for p in inputs]
    return _merge_into(out_path, sources)


def _merge_into(out_path: Path, sources: list[tuple[sqlite3.Connection, str]]) -> MergeReport:
    report = MergeReport()
    try:
        if out_path.exists():
            with Store(out_path) as store, store._write() as out:
                _merge_all(out, sources, report)
            return report
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with Store(tmp) as store, store._write() as out:
                _merge_all(out, sources, report)
            os.replace(tmp, out_path)  # closed: its WAL is checkpointed into the file and removed
        finally:
            for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
                leftover.unlink(missing_ok=True)
    finally:
        for src, _ in sources:
            src.close()
    return report


def check_store(path: Path) -> list[str]:
    """Integrity and schema of a store, read-only: the problems found (empty: healthy)."""
    try:
        db = _open_input(Path(path), verify=False)
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    try:
        problems = [r[0] for r in db.execute("PRAGMA integrity_check(20)") if r[0] != "ok"]
        problems += [f"foreign key: {tuple(r)}" for r in db.execute("PRAGMA foreign_key_check")]
        applied = [r[0] for r in db.execute("SELECT name FROM schema_migrations ORDER BY id")]
        known = [name for name, _ in MIGRATIONS]
        if applied != known[: len(applied)]:
            problems.append(f"schema: migrations {applied} are not this attnbench's {known}")
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    finally:
        db.close()
    return problems
