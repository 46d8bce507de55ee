"""Leases: a driver claims a cell in the store before training it, so that two drivers on one
store never train the same cell.

A lease is a row of the store's ``leases`` table: the cell key, the owner's process id and
host, what tells that process from a later one given the same id (``machine``: the boot and
the process-id namespace; ``process_start``: the process's start time in clock ticks), when
it was taken, and the owner's last heartbeat. At most one lease per cell is held at a time
(a unique index over the held ones). A lease ends when its cell is stored (in the same
transaction as the cell's rows), when its owner lets it go (the run ends or stops), or when
another driver finds the owner gone:

- the same machine (same host name, boot and process-id namespace): the owner is gone when
  no process has its id, or the process that has it started at another time (a reused id),
  or it is a zombie;
- another machine: the owner is gone when its heartbeat is older than ``LEASE_TIMEOUT_S``
  (5 minutes). A driver holding leases writes its heartbeat every ``HEARTBEAT_S`` (30 s)
  from a background thread, whatever its cells are doing. A heartbeat more than
  ``LEASE_TIMEOUT_S`` ahead of this machine's clock tells nothing (the clocks disagree by more
  than the timeout): the lease counts as gone, so a clock skew never makes a driver wait
  unbounded.

A lease row that cannot be read (a process id or heartbeat that is not a number, a hand edit
or a damaged store) counts as gone: the cell is taken over, never a traceback.

A driver that finds a cell leased by a live owner takes other cells, then waits for the
leased ones to be stored (``attnbench.run.runner``). Ended leases stay in the table: the
history of which process trained which cell."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

HEARTBEAT_S = 30.0  # a holder's heartbeat period
LEASE_TIMEOUT_S = 300.0  # another machine's lease expires this long after its last heartbeat

CLAIMED, STORED = "claimed", "stored"  # what ``claim`` answers, besides a live holder
ENDINGS = ("stored", "released", "refused", "expired")


@dataclass(frozen=True)
class Owner:
    """A process that can hold leases."""

    pid: int
    host: str
    machine: str  # boot id and process-id namespace ('' where unknown)
    process_start: str  # start time in clock ticks since boot ('' where unknown)


@dataclass(frozen=True)
class Holder:
    """The live owner of a lease another driver asked for."""

    pid: int
    host: str
    started_at: float
    expires_at: float | None = None  # another machine's lease: LEASE_TIMEOUT_S after its last heartbeat

    def text(self) -> str:
        since = f"process {self.pid} on {self.host}, since {_clock(self.started_at)}"
        if self.expires_at is None:
            return since
        return f"{since}; its lease expires at {_clock(self.expires_at)} unless that driver renews it"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if math.isfinite(t) else "an unknown time"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of process ``pid`` from /proc; None where unreadable."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime 22
    return (fields[0], fields[19]) if len(fields) > 19 else None


@lru_cache(maxsize=1)
def _machine() -> str:
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return f"{boot}/{pidns}" if boot or pidns else ""


def me() -> Owner:
    """This process (a driver that writes the store)."""
    stat = _stat(os.getpid())
    return Owner(os.getpid(), socket.gethostname(), _machine(), stat[1] if stat else "")


def process_alive(pid: int, process_start: str) -> bool:
    """Whether process ``pid`` of this machine runs, and is the one that started at
    ``process_start`` (clock ticks; '' where unknown: any process with that id)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    except OSError:
        return False
    stat = _stat(pid)
    if stat is None:  # no /proc (not Linux): the id alone tells
        return True
    state, start = stat
    return state not in ("Z", "X") and (not process_start or start == process_start)


def _number(value: Any) -> float | None:
    """A lease row's number, or None where the row does not hold one (read as a gone owner)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def holder_alive(row: Any, owner: Owner, now: float) -> bool:
    """Whether the owner of lease ``row`` is still there, as ``owner`` can tell (module
    docstring); an unreadable row's owner is gone."""
    pid, heartbeat = _number(row["pid"]), _number(row["heartbeat_at"])
    if pid is None or heartbeat is None or pid != int(pid) or pid <= 0:
        return False
    if row["host"] == owner.host and row["machine"] == owner.machine:
        return process_alive(int(pid), str(row["process_start"] or ""))
    return -LEASE_TIMEOUT_S <= now - heartbeat < LEASE_TIMEOUT_S  # far in the future: clocks disagree


def _holder(row: Any, owner: Owner) -> Holder:
    """The live owner of lease ``row`` (``holder_alive``), as a waiting driver names it."""
    started, heartbeat = _number(row["started_at"]), _number(row["heartbeat_at"])
    remote = not (row["host"] == owner.host and row["machine"] == owner.machine)
    expires = heartbeat + LEASE_TIMEOUT_S if remote and heartbeat is not None else None
    return Holder(int(row["pid"]), str(row["host"]), math.nan if started is None else started, expires)


def _mine(row: Any, owner: Owner) -> bool:
    return (row["pid"], row["host"], row["machine"], row["process_start"]) == (
        owner.pid,
        owner.host,
        owner.machine,
        owner.process_start,
    )


def claim(db: sqlite3.Connection, cell_key: str, owner: Owner, *, settled: bool) -> str | Holder:
    """In the caller's write transaction: ``STORED`` when ``settled`` (the cell needs no run),
    else ``CLAIMED`` once ``owner`` holds the cell's lease (taking it over from a gone owner),
    else the live ``Holder`` of it."""
    if settled:
        return STORED
    now = time.time()
    row = db.execute("SELECT * FROM leases WHERE cell_key = ? AND ended_at IS NULL", (cell_key,)).fetchone()
    if row is not None:
        if _mine(row, owner):
            return CLAIMED
        if holder_alive(row, owner, now):
            return _holder(row, owner)
        db.execute("UPDATE leases SET ended_at = ?, ending = 'expired' WHERE id = ?", (now, row["id"]))
    db.execute(
        "INSERT INTO leases (cell_key, pid, host, machine, process_start, started_at, heartbeat_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (cell_key, owner.pid, owner.host, owner.machine, owner.process_start, now, now),
    )
    return CLAIMED


def end(db: sqlite3.Connection, owner: Owner, ending: str, cell_key: str | None = None) -> int:
    """End ``owner``'s held lease of ``cell_key`` (None: all its held leases) as ``ending``;
    returns how many ended."""
    if ending not in ENDINGS:
        raise ValueError(f"unknown lease ending {ending!r}; one of {ENDINGS}")
    sql = (
        "UPDATE leases SET ended_at = ?, ending = ? WHERE ended_at IS NULL AND pid = ? AND host = ? "
        "AND machine = ? AND process_start = ?"
    )
    args: list[Any] = [time.time(), ending, owner.pid, owner.host, owner.machine, owner.process_start]
    if cell_key is not None:
        sql, args = sql + " AND cell_key = ?", [*args, cell_key]
    return db.execute(sql, args).rowcount


def beat(db: sqlite3.Connection, owner: Owner) -> int:
    """Renew the heartbeat of every lease ``owner`` holds; returns how many it holds."""
    return db.execute(
        "UPDATE leases SET heartbeat_at = ? WHERE ended_at IS NULL AND pid = ? AND host = ? AND machine = ? "
        "AND process_start = ?",
        (time.time(), owner.pid, owner.host, owner.machine, owner.process_start),
    ).rowcount


def taken(db: sqlite3.Connection, cell_key: str | None = None) -> list[dict[str, Any]]:
    """Every lease taken (held ones have ``ended_at`` None), oldest first: who trained which cell."""
    sql, args = "SELECT * FROM leases", ()
    if cell_key is not None:
        sql, args = sql + " WHERE cell_key = ?", (cell_key,)
    return [dict(r) for r in db.execute(sql + " ORDER BY id", args)]


class Heartbeat:
    """A background thread that renews ``owner``'s leases every HEARTBEAT_S through its own
    connection, so drivers on other machines tell a live holder from a gone one. A missed beat
    (a long lock, a full disk) is retried at the next."""

    def __init__(self, path: Path, owner: Owner, lock_wait_s: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(path, owner, lock_wait_s), name="attnbench-lease-heartbeat", daemon=True
        )
        self._thread.start()

    def _run(self, path: Path, owner: Owner, lock_wait_s: float) -> None:
        db: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    db = db or sqlite3.connect(path, timeout=lock_wait_s, isolation_level=None)
                    db.execute("BEGIN IMMEDIATE")
                    beat(db, owner)
                    db.execute("COMMIT")
                except sqlite3.Error:
                    if db is not None and db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            db.execute("ROLLBACK")
        finally:
            if db is not None:
                db.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
