"""Side files: a finished cell whose write to the store failed (disk full, read-only,
locked) is kept as JSON in ``<store>.unsaved/`` and imported by the next open."""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path

from attnbench.store import jsonsafe
from attnbench.store.records import Metric, Result, RunRecord


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
