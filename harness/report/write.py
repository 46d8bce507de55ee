"""Writing a report to a folder: ``index.html`` (self-contained), ``report.md`` with its
figures in ``figures/``, and every table as CSV and Parquet in ``tables/``. Files this
writer made earlier in ``figures/`` and ``tables/`` are replaced, nothing else is touched."""

from __future__ import annotations

import hashlib
import os
import uuid
import re
from pathlib import Path

import pandas as pd

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


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")  # one per writer
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write(report: Report, out_dir: Path) -> Path:
    """Write ``report`` under ``out_dir``; returns the path of ``index.html``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for sub, suffixes in _OWNED.items():
        (out_dir / sub).mkdir(exist_ok=True)
        for old in (out_dir / sub).iterdir():
            if old.is_file() and old.suffix in suffixes:
                old.unlink()
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
    _write_atomic(out_dir / "report.md",
                  to_markdown(report, lambda slug: f"figures/{fig_names[slug]}.png", links).encode())
    index = out_dir / "index.html"
    _write_atomic(index, to_html(report, links).encode())
    return index.resolve()
