"""Writing a report to a folder: ``index.html`` (self-contained), ``report.md`` with its
figures in ``figures/``, and every table as CSV and Parquet in ``tables/``. The report is
written whole into a temporary folder beside the target and swapped in by renames, so a
reader (or a kill mid-write) sees the old report or the new one, never a mix."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

import pandas as pd

from attnbench.errors import ReportError
from attnbench.report.document import Report
from attnbench.report.document import Table
from attnbench.report.render import to_html
from attnbench.report.render import to_markdown
from attnbench.report.values import scalar

_OWNED = {"figures": (".png",), "tables": (".csv", ".parquet")}


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


def _owned(path: Path) -> bool:
    """Whether ``path`` (an entry of a report folder) is a file this writer makes."""
    if path.name in ("index.html", "report.md"):
        return path.is_file()
    suffixes = _OWNED.get(path.name)
    return suffixes is not None and path.is_dir() and all(
        f.is_file() and f.suffix in suffixes for f in path.iterdir())


def _check_target(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"report folder {out_dir} is a file; pass --out a folder (new or an earlier report's)")
    foreign = sorted(p.name for p in out_dir.iterdir() if not _owned(p)) if out_dir.is_dir() else []
    if foreign:
        raise ReportError(f"report folder {out_dir} holds files a report does not make ({', '.join(foreign[:5])}); "
                          "a report replaces its folder whole, so pass --out a new folder or an earlier report's")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _sibling(target: Path, tag: str) -> Path:
    return target.with_name(f".{target.name}.{tag}.{os.getpid()}.{uuid.uuid4().hex[:8]}")


def _recover(target: Path) -> None:
    """Clean up after writers killed mid-write: their unfinished folders go; a previous
    report a kill left moved aside (between the two renames) goes back in place."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(new|old)\.(\d+)\.[0-9a-f]{{8}}$")
    for entry in sorted(target.parent.iterdir()) if target.parent.is_dir() else []:
        m = pattern.match(entry.name)
        if not m or _pid_alive(int(m.group(2))):
            continue
        if m.group(1) == "old" and not target.exists():
            os.rename(entry, target)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def _swap_in(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``, moving an existing ``target`` aside first and removing it after."""
    for _ in range(10):  # another writer of the same folder may move it between our steps
        old = None
        if target.exists():
            old = _sibling(target, "old")
            try:
                os.rename(target, old)
            except FileNotFoundError:
                continue
        try:
            os.rename(new, target)
        except OSError:  # another writer's report landed there first: ours replaces it next round
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            continue
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return
    raise ReportError(f"could not put the report in place at {target}: other writers kept replacing it; try again")


def _write_files(report: Report, out_dir: Path) -> None:
    """Every file of ``report`` into the empty folder ``out_dir``."""
    for sub in _OWNED:
        (out_dir / sub).mkdir()
    tables, figs = report.tables(), report.figures()
    table_names = dict(zip(map(id, tables), _unique([t.slug for t in tables])))
    fig_names = dict(zip([f.slug for f in figs], _unique([f.slug for f in figs])))
    for f, name in zip(figs, _unique([f.slug for f in figs])):
        (out_dir / "figures" / f"{name}.png").write_bytes(f.png)

    def links(table: Table) -> dict[str, str]:
        name = table_names[id(table)]
        return {"CSV": f"tables/{name}.csv", "Parquet": f"tables/{name}.parquet"}

    for t in tables:
        frame = _parquet_ready(t.data)
        frame.to_csv(out_dir / links(t)["CSV"], index=False)
        frame.to_parquet(out_dir / links(t)["Parquet"], index=False)
    (out_dir / "report.md").write_bytes(
        to_markdown(report, lambda slug: f"figures/{fig_names[slug]}.png", links).encode())
    (out_dir / "index.html").write_bytes(to_html(report, links).encode())


def write(report: Report, out_dir: Path) -> Path:
    """Write ``report`` as the folder ``out_dir`` (replacing an earlier report there whole);
    returns the path of ``index.html``. Raises ReportError when ``out_dir`` holds other files."""
    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _recover(out_dir)
    _check_target(out_dir)
    new = _sibling(out_dir, "new")
    new.mkdir()
    try:
        _write_files(report, new)
        _swap_in(new, out_dir)
    finally:
        if new.exists():
            shutil.rmtree(new, ignore_errors=True)
    return (out_dir / "index.html").resolve()
