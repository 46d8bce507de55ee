"""Comparison reports generated from the results store only.

    from attnbench.report import write_report
    index = write_report(Path("results/attnbench.sqlite"), suite=None, out_dir=None)

writes ``<store folder>/reports/<suite>/index.html`` (self-contained page; for the
default store that is ``results/reports/<suite>/``), ``report.md`` with
``figures/*.png``, and ``tables/*.csv`` / ``*.parquet``. Modules: ``load`` (store ->
DataFrames, read-only), ``selection`` (best grid point per variant), one module per
section (``training``, ``speed``, ``scaling``, ``downstream``, ``gate`` with provenance,
``problems``), ``figures`` (seaborn, through ``attnbench.plotting``), ``render`` (HTML,
Markdown), ``write`` (files).
"""

from __future__ import annotations

from pathlib import Path

from attnbench.report.build import build_report
from attnbench.report.load import StoreData, load_store
from attnbench.report.write import folder_name, write

__all__ = ["StoreData", "build_report", "load_store", "write_report"]


def write_report(store_path: Path, suite: str | None = None, out_dir: Path | None = None) -> Path:
    """Make the report of ``suite`` (default: the suite of the most recent run) from the
    store at ``store_path`` and return the path of its ``index.html``. The folder is
    ``out_dir``, else ``reports/<suite>/`` beside the store (with a hash suffix where the
    suite's name had to be changed to be a folder name) (``results/reports/<suite>/``
    for the default store ``results/attnbench.sqlite``).

    Raises ``attnbench.errors.ReportError`` when the store is missing or not a store, or
    when ``suite`` is not in it."""
    data = load_store(Path(store_path), suite)
    report = build_report(data)
    folder = Path(out_dir) if out_dir is not None else Path(store_path).parent / "reports" / folder_name(report.suite)
    return write(report, folder)
