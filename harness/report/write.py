"""Writing a report to a folder: ``index.html`` (self-contained), ``report.md`` with its
figures in ``figures/``, and every table as CSV and Parquet in ``tables/``. The new report is
written into a folder beside the target, then two renames swap it in: the old folder aside, the
new one in its place. A writer stopped before the swap leaves the old report whole; one stopped
between the two renames leaves it aside, and it is put back (at once, or by the next writer).
Files this writer made earlier are replaced, anything else in the folder is kept."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pandas as pd

from attnbench.report.document import Report, Table
from attnbench.report.render import to_html, to_markdown
from attnbench.report.values import scalar

_OWNED = {"figures": (".png",), "tables": (".csv", ".parquet")}
# What a writer makes beside the report folder NAME: .NAME.PID.HEX.tmp, the new report being written,
# and .NAME.PID.HEX.old, the old report set aside during the swap.
_STAGING = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.(?P<kind>tmp|old)")


def safe_name(name: str) -> str:
    """A file or folder name from any text: [A-Za-z0-9._-] kept, the rest '_', no leading dot."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "unnamed"
    return out[:120]


def folder_name(suite: str) -> str:
    """A report folder per suite: a name that ``safe_name`` changed gets a hash of the
    original, so two suites differing only in dropped characters never share a folder."""
    safe = safe_name(suite)
    return safe if safe == suite else f"{safe[:111]}-{hashlib.sha256(suite.encode()).hexdigest()[:8]}"


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        base = safe_name(n)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def _parquet_ready(frame: pd.DataFrame) -> pd.DataFrame:
    """One type per column: lists/dicts as JSON text; object columns mixing types as text."""
    out = frame.map(scalar) if not frame.empty else frame.copy()
    for col in out.columns:
        if out[col].dtype == object:
            kinds = {type(v) for v in out[col] if v is not None and not (isinstance(v, float) and pd.isna(v))}
            if len(kinds) > 1 or (kinds and kinds <= {bool} and out[col].isna().any()):
                out[col] = [None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v) for v in out[col]]
    out.columns = [str(c) for c in out.columns]
    return out


def _carry_over(old: Path, new: Path) -> None:
    """Copy what the writer does not own from the old report folder into the new one."""
    for entry in old.iterdir():
        if entry.name in ("index.html", "report.md") or entry.name.startswith("."):
            continue
        if entry.name in _OWNED and entry.is_dir():
            for f in entry.iterdir():
                if not (f.is_file() and f.suffix in _OWNED[entry.name]) and not (new / entry.name / f.name).exists():
                    (shutil.copytree if f.is_dir() else shutil.copy2)(f, new / entry.name / f.name)
        elif not (new / entry.name).exists():
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, new / entry.name)


def _running(pid: int) -> bool:
    """Whether a process with this id runs on this machine (assumed on Windows, where os.kill
    would end it)."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's
        return True
    return pid > 0


def _clear_left_behind(out_dir: Path, started: float) -> None:
    """What killed writers left beside ``out_dir``: folders older than this writer's start, of a
    process not running here (a writer on another machine sharing the folder has started after us,
    or has been at it since before us and is gone). A report set aside while no report is in place
    is put back; the rest is removed."""
    for entry in sorted(out_dir.parent.iterdir(), key=lambda e: e.name):
        found = _STAGING.fullmatch(entry.name)
        if found is None or found["name"] != out_dir.name or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            stale = entry.stat().st_mtime < started and not _running(int(found["pid"]))
        except OSError:  # removed meanwhile
            continue
        if stale and found["kind"] == "old" and not out_dir.exists():
            os.replace(entry, out_dir)
        elif stale:
            shutil.rmtree(entry, ignore_errors=True)


def write(report: Report, out_dir: Path) -> Path:
    """Write ``report`` as the folder ``out_dir``; returns the path of ``index.html``. The new
    report is written beside it and swapped in by two renames; what the writer does not own is
    kept, and what killed writers left is cleared first."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _clear_left_behind(out_dir, time.time())
    stem = f".{out_dir.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    new, old = out_dir.with_name(f"{stem}.tmp"), out_dir.with_name(f"{stem}.old")
    try:
        _write_into(report, new)
        if out_dir.exists():
            _carry_over(out_dir, new)
            os.replace(out_dir, old)  # until the next rename there is no report folder
        os.replace(new, out_dir)
    finally:
        if old.exists() and not out_dir.exists():  # stopped between the two renames
            os.replace(old, out_dir)
        shutil.rmtree(new, ignore_errors=True)  # left only when writing failed
        shutil.rmtree(old, ignore_errors=True)
    return (out_dir / "index.html").resolve()


def _write_into(report: Report, out_dir: Path) -> None:
    for sub in _OWNED:
        (out_dir / sub).mkdir(parents=True)
    tables, figs = report.tables(), report.figures()
    table_names = dict(zip(map(id, tables), _unique([t.slug for t in tables]), strict=True))
    fig_names = dict(zip([f.slug for f in figs], _unique([f.slug for f in figs]), strict=True))
    for f, name in zip(figs, _unique([f.slug for f in figs]), strict=True):
        (out_dir / "figures" / f"{name}.png").write_bytes(f.png)

    def links(table: Table) -> dict[str, str]:
        name = table_names[id(table)]
        return {"CSV": f"tables/{name}.csv", "Parquet": f"tables/{name}.parquet"}

    for t in tables:
        frame = _parquet_ready(t.data)
        frame.to_csv(out_dir / links(t)["CSV"], index=False)
        frame.to_parquet(out_dir / links(t)["Parquet"], index=False)
    (out_dir / "report.md").write_text(
        to_markdown(report, lambda slug: f"figures/{fig_names[slug]}.png", links), encoding="utf-8"
    )
    (out_dir / "index.html").write_text(to_html(report, links), encoding="utf-8")
