"""The results store: one SQLite file (WAL), named ordered migrations, provenance on
every run. A cell's rows are written in a single transaction, so a killed process leaves
either the whole cell or nothing, and two processes finishing the same cell store it once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from attnbench.errors import StoreError

DEFAULT_STORE = Path("results") / "attnbench.sqlite"
_SQLITE_MAGIC = b"SQLite format 3\x00"

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
)


@dataclass
class Metric:
    step: int
    tokens: int
    elapsed_s: float
    name: str
    value: float | None


@dataclass
class Result:
    name: str
    value: float | None
    unit: str = ""
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunRecord:
    """Everything one finished cell stores; written atomically by ``Store.save_run``."""

    cell_key: str
    suite: str
    experiment: str
    kind: str
    variant: str
    status: str  # "done", "diverged", "failed", "oom", "timeout", "check_failed"
    seed: int | None
    coords: dict[str, Any]
    config: dict[str, Any]
    provenance: dict[str, Any]
    summary: dict[str, Any]
    started_at: float
    finished_at: float
    error: str | None = None
    metrics: list[Metric] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class Store:
    """A results store at ``path`` (created with its folder if missing)."""

    def __init__(self, path: str | Path = DEFAULT_STORE) -> None:
        self.path = Path(path)
        self._check_is_sqlite()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open results store {self.path}: {exc}") from exc

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

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all of it is stored, or none of it."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- schema -------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Apply pending migrations under the write lock, so two processes opening a new
        store at once cannot both apply them."""
        with self._write() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at REAL NOT NULL)"
            )
            applied = [r["name"] for r in db.execute("SELECT name FROM schema_migrations ORDER BY id")]
            known = [name for name, _ in MIGRATIONS]
            if applied != known[: len(applied)]:
                raise StoreError(
                    f"results store {self.path} has migrations {applied} that this attnbench does "
                    f"not know (it knows {known}); it was written by a newer or different version. "
                    "Upgrade attnbench or use another --store."
                )
            for name, sql in MIGRATIONS[len(applied):]:
                for statement in filter(str.strip, sql.split(";")):
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", (name, time.time())
                )

    def schema(self) -> list[str]:
        """The schema's SQL, for pinning in tests."""
        rows = self._db.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
        )
        return [" ".join(r["sql"].split()) for r in rows]

    # -- runs ---------------------------------------------------------------------------
    def has_run(self, cell_key: str) -> bool:
        row = self._db.execute("SELECT 1 FROM runs WHERE cell_key = ?", (cell_key,)).fetchone()
        return row is not None

    def save_run(self, run: RunRecord) -> int | None:
        """Store a cell with its metrics and results atomically; None if already stored."""
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO runs (cell_key, suite, experiment, kind, variant, status, seed, "
                "coords, config, provenance, summary, error, started_at, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (cell_key) DO NOTHING",
                (run.cell_key, run.suite, run.experiment, run.kind, run.variant, run.status,
                 run.seed, _dumps(run.coords), _dumps(run.config), _dumps(run.provenance),
                 _dumps(run.summary), run.error, run.started_at, run.finished_at),
            )
            if cur.rowcount == 0:
                return None
            run_id = cur.lastrowid
            db.executemany(
                "INSERT INTO metrics (run_id, step, tokens, elapsed_s, name, value) VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, m.step, m.tokens, m.elapsed_s, m.name, m.value) for m in run.metrics],
            )
            db.executemany(
                "INSERT INTO results (run_id, name, value, unit, tags) VALUES (?, ?, ?, ?, ?)",
                [(run_id, r.name, r.value, r.unit, _dumps(r.tags)) for r in run.results],
            )
        return run_id

    def runs(self, suite: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if suite is not None:
            sql, args = sql + " AND suite = ?", args + [suite]
        if kind is not None:
            sql, args = sql + " AND kind = ?", args + [kind]
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            for key in ("coords", "config", "provenance", "summary"):
                d[key] = json.loads(d[key])
            out.append(d)
        return out

    def metrics(self, run_id: int, name: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM metrics WHERE run_id = ?", [run_id]
        if name is not None:
            sql, args = sql + " AND name = ?", args + [name]
        return [dict(r) for r in self._db.execute(sql + " ORDER BY step", args)]

    def results(self, run_id: int) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT * FROM results WHERE run_id = ? ORDER BY rowid", (run_id,))
        return [dict(r, tags=json.loads(r["tags"])) for r in rows]

    def suites(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT suite FROM runs ORDER BY suite")]

    # -- trust gate ---------------------------------------------------------------------
    def save_checks(
        self, gate_key: str, variant: str, results: list[Any], provenance: dict[str, Any]
    ) -> None:
        """Store one variant's check verdicts (``attnbench.gate.checks.CheckResult``-like rows)."""
        now = time.time()
        with self._write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO checks (gate_key, variant, check_name, status, figure, "
                "tolerance, detail, provenance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(gate_key, variant, r.check, r.status, r.figure, r.tolerance, r.detail,
                  _dumps(provenance), now) for r in results],
            )

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
        return [dict(r, provenance=json.loads(r["provenance"])) for r in rows]
