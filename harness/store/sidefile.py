"""Side files: a finished cell whose write to the store failed (disk full, read-only,
locked) is kept as JSON in ``<store>.unsaved/`` and imported by the next open."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Protocol

from attnbench.errors import StoreError
from attnbench.store import jsonsafe
from attnbench.store.records import Metric, Result, RunRecord


class Saves(Protocol):
    """What a side file needs of a store: where it is, and how a run is saved."""

    path: Path

    def save_run(self, run: RunRecord) -> int | None: ...


def side_folder(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".unsaved")


def set_aside(store_path: Path, run: RunRecord) -> Path:
    """Write ``run`` beside the store; returns the file written (raises OSError if it cannot)."""
    folder = side_folder(store_path)
    folder.mkdir(exist_ok=True)
    path = folder / f"{run.cell_key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(jsonsafe.dumps(dataclasses.asdict(run)), encoding="utf-8")
    os.replace(tmp, path)
    return path


def pending(store_path: Path) -> list[Path]:
    folder = side_folder(store_path)
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def read(path: Path) -> RunRecord:
    data = jsonsafe.loads(path.read_text(encoding="utf-8"))
    data["metrics"] = [Metric(**m) for m in data["metrics"]]
    data["results"] = [Result(**r) for r in data["results"]]
    return RunRecord(**data)


def save_or_set_aside(store: Saves, run: RunRecord) -> int | None:
    """``store.save_run(run)``; if the write fails, ``run`` is kept in a side file and the error
    says where (the next open of the store imports it)."""
    try:
        return store.save_run(run)
    except sqlite3.Error as exc:
        try:
            kept = f"its result is kept in {set_aside(store.path, run)}"
        except OSError as side_exc:
            kept = f"and keeping it beside the store failed too ({side_exc})"
        raise StoreError(
            f"could not write the finished cell {run.experiment}/{run.variant} "
            f"to results store {store.path} ({exc}); {kept}. Fix the store (free disk "
            "space, permissions, the process holding a lock) and run again: the "
            "next run imports it."
        ) from exc


def import_pending(store: Saves) -> list[str]:
    """Store the results an earlier run could not write; each file goes once stored."""
    imported = []
    for path in pending(store.path):
        try:
            run = read(path)
        except FileNotFoundError:  # another driver opening the store imported it
            continue
        store.save_run(run)
        path.unlink(missing_ok=True)
        imported.append(run.cell_key)
    return imported
