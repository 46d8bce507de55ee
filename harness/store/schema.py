"""The store's schema: named, ordered migrations, applied under the write lock."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from attnbench.errors import StoreError

# (name, sql). Append only: never edit or reorder an applied migration.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_initial",
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            cell_key TEXT NOT NULL UNIQUE,
            suite TEXT NOT NULL,
            experiment TEXT NOT NULL,
            kind TEXT NOT NULL,
            variant TEXT NOT NULL,
            status TEXT NOT NULL,
            seed INTEGER,
            coords TEXT NOT NULL,
            config TEXT NOT NULL,
            provenance TEXT NOT NULL,
            summary TEXT NOT NULL,
            error TEXT,
            started_at REAL NOT NULL,
            finished_at REAL NOT NULL
        );
        CREATE INDEX runs_suite ON runs (suite, experiment, variant);
        CREATE TABLE metrics (
            run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            elapsed_s REAL NOT NULL,
            name TEXT NOT NULL,
            value REAL
        );
        CREATE INDEX metrics_run ON metrics (run_id, name, step);
        CREATE TABLE results (
            run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            value REAL,
            unit TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX results_run ON results (run_id, name);
        CREATE TABLE checks (
            gate_key TEXT NOT NULL,
            variant TEXT NOT NULL,
            check_name TEXT NOT NULL,
            status TEXT NOT NULL,
            figure REAL,
            tolerance REAL,
            detail TEXT NOT NULL,
            provenance TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (gate_key, check_name)
        );
        CREATE INDEX checks_variant ON checks (variant, created_at);
        """,
    ),
    (
        # Every earlier attempt at a cell (a failed one that was retried) and every result
        # that a merge found in conflict with the one kept: nothing is thrown away.
        "0002_attempts",
        """
        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            cell_key TEXT NOT NULL,
            reason TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            summary TEXT NOT NULL,
            provenance TEXT NOT NULL,
            started_at REAL NOT NULL,
            finished_at REAL NOT NULL,
            recorded_at REAL NOT NULL
        );
        CREATE INDEX attempts_cell ON attempts (cell_key, started_at)
        """,
    ),
    (
        # A driver claims a cell here before training it (attnbench.store.leases): one held lease
        # per cell (ended_at NULL), with the owner's process id, host, and what tells that process
        # from a later one with the same id (machine: boot and pid namespace; process_start: its
        # start time in clock ticks). A lease ends when its cell is stored ('stored'), when its
        # owner lets it go ('released'), or when another driver finds the owner gone ('expired').
        # Ended leases stay: the history of who trained which cell.
        "0003_leases",
        """
        CREATE TABLE leases (
            id INTEGER PRIMARY KEY,
            cell_key TEXT NOT NULL,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            machine TEXT NOT NULL,
            process_start TEXT NOT NULL,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL,
            ended_at REAL,
            ending TEXT
        );
        CREATE UNIQUE INDEX leases_held ON leases (cell_key) WHERE ended_at IS NULL;
        CREATE INDEX leases_cell ON leases (cell_key, started_at)
        """,
    ),
)


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Apply pending migrations (the caller holds a write transaction)."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at REAL NOT NULL)"
    )
    applied = [r[0] for r in db.execute("SELECT name FROM schema_migrations ORDER BY id")]
    known = [name for name, _ in MIGRATIONS]
    if applied != known[: len(applied)]:
        raise StoreError(
            f"results store {path} has migrations {applied} that this attnbench does "
            f"not know (it knows {known}); it was written by a newer or different version. "
            "Upgrade attnbench or use another --store."
        )
    for name, sql in MIGRATIONS[len(applied) :]:
        for statement in filter(str.strip, sql.split(";")):
            db.execute(statement)
        db.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
