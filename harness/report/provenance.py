"""The provenance section: which code, libraries and hardware produced the suite's rows
(every distinct value with the number of runs that carry it), and the run counts."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from typing import Any

import pandas as pd

from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData


def _git(p: dict[str, Any]) -> str:
    git = p.get("git") or {}
    commit = git.get("commit")
    if not commit:
        return "unknown (not a git checkout)"
    return commit + (" (uncommitted changes)" if git.get("dirty") else "")


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def provenance_rows(data: StoreData) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(item: str, values: list[str]) -> None:
        for value, n in sorted(Counter(values).items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append({"item": item, "value": value, "runs": n})

    provs = list(data.runs["provenance"])
    add("git commit", [_git(p) for p in provs])
    add("device", [str(p.get("device", "unknown")) for p in provs])
    add("platform", [str(p.get("platform", "unknown")) for p in provs])
    add("torch threads", [str(p.get("torch_threads", "unknown")) for p in provs])
    packages = sorted({k for p in provs for k in (p.get("versions") or {})})
    for pkg in packages:
        add(f"version: {pkg}", [str((p.get("versions") or {}).get(pkg, "unknown")) for p in provs])
    variants: dict[str, list[str]] = {}
    for cfg in data.runs["config"]:  # each variant's plugin version, source hash and options
        ident, model = (cfg.get("key_inputs") or {}).get("variant"), cfg.get("model") or {}
        if isinstance(ident, dict):
            variants.setdefault(f"variant: {ident.get('name')}", []).append(
                f"plugin {ident.get('plugin')} ({ident.get('distribution')} {ident.get('distribution_version')}), "
                f"version {ident.get('version')}, sources {str(ident.get('sources'))[:16]}, "
                f"options {json.dumps(model.get('options') or {}, sort_keys=True, default=str)}"
            )
    for item, values in sorted(variants.items()):
        add(item, values)
    add("runs (kind, status)", [f"{k}, {s}" for k, s in zip(data.runs["kind"], data.runs["status"], strict=True)])
    return rows


def provenance_section(data: StoreData) -> Section:
    section = Section(
        "Provenance", intro=("Distinct values recorded with the suite's runs, with how many runs carry each.")
    )
    if data.runs.empty:
        section.missing = "no runs, so no provenance"
        return section
    frame = pd.DataFrame(provenance_rows(data))
    section.tables.append(Table("provenance", "Provenance of the rows in this report", frame, frame.copy()))
    start, end = data.runs["started_at"].min(), data.runs["finished_at"].max()
    section.notes.append(
        f"Runs from {_when(start)} to {_when(end)}; store schema migrations: "
        f"{', '.join(data.migrations) or 'none recorded'}."
    )
    return section
