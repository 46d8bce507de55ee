"""Where the numbers come from. The trust-gate section: each variant's check verdicts (variant x
check, with the measured figure against its tolerance), failures stated in words; verdicts are
those the suite's runs were gated with (``provenance.gate.key``), for runs that name no gate key
the variant's latest verdict in the store. The provenance section: which code, libraries and
hardware produced the suite's rows (every distinct value with the number of runs that carry it)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pandas as pd

from attnbench.decision_words import (
    CHECK_ERROR,
    CHECK_FAIL,
    CHECK_PASS,
    CHECK_SKIP,
    GATE_FAILED,
    GATE_NOT_RECORDED,
    GATE_PASSED,
)
from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.values import MISSING, num

FAILING = ("fail", "error")
CELL_WORDS = {"pass": CHECK_PASS, "fail": CHECK_FAIL, "error": CHECK_ERROR, "skip": CHECK_SKIP}  # stored -> printed


def gate_text(provenances: Iterable[dict[str, Any]]) -> str:
    """A row's trust gate from its runs' provenance: "passed", "FAILED <checks>", or "not recorded"."""
    provs = list(provenances)
    failed = sorted({c for p in provs for c in (p.get("gate") or {}).get("failed", [])})
    if failed:
        return GATE_FAILED.format(checks=", ".join(failed))
    return GATE_PASSED if any("gate" in p for p in provs) else GATE_NOT_RECORDED


def suite_verdicts(data: StoreData) -> pd.DataFrame:
    """Check rows relevant to the suite's variants (empty frame with the columns if none)."""
    checks = data.checks
    if checks.empty or data.runs.empty:
        return checks.iloc[0:0]
    keys = {(p.get("gate") or {}).get("key") for p in data.runs["provenance"]} - {None}
    chosen = checks[checks["gate_key"].isin(keys)]
    gated = set(chosen["variant"])
    for variant in sorted(set(data.runs["variant"]) - gated):
        mine = checks[checks["variant"] == variant]
        if not mine.empty:
            latest = mine.loc[mine["created_at"].idxmax(), "gate_key"]
            chosen = pd.concat([chosen, mine[mine["gate_key"] == latest]])
    return chosen


def failing_elsewhere(data: StoreData) -> list[str]:
    """Variants whose latest verdict fails and that have no runs in this suite (a suite
    refuses a failing variant's cells unless it sets allow_failed_checks)."""
    checks = data.checks
    out = []
    for variant in sorted(set(checks["variant"]) - set(data.runs["variant"])):
        mine = checks[checks["variant"] == variant]
        latest = mine[mine["gate_key"] == mine.loc[mine["created_at"].idxmax(), "gate_key"]]
        failed = latest[latest["status"].isin(FAILING)]
        if not failed.empty:
            out.append(f"{variant}: failed {', '.join(failed['check_name'])}")
    return out


def _cell(r: pd.Series) -> str:
    status = CELL_WORDS.get(str(r["status"]), str(r["status"]))
    if r["figure"] is None or pd.isna(r["figure"]):
        return status
    tol = f" (tolerance {num(r['tolerance'], 3)})" if r["tolerance"] is not None and pd.notna(r["tolerance"]) else ""
    return f"{status}: {num(r['figure'], 3)}{tol}"


def gate_section(data: StoreData) -> Section:
    section = Section(
        "Trust gate",
        intro=(
            "Checks every variant passed (or not) before its numbers were recorded: no information from "
            "future tokens (outputs and gradients), incremental decoding equal to the parallel form, "
            "finite outputs on long inputs, determinism under a seed, declared facts."
        ),
    )
    verdicts = suite_verdicts(data)
    others = failing_elsewhere(data)
    if others:
        section.notes.append(
            "Variants in this store with no runs in this suite whose latest trust-gate "
            "verdict FAILED: " + "; ".join(others) + "."
        )
    if verdicts.empty:
        section.missing = (
            "no trust-gate verdicts for this suite's variants in this store: they are "
            "recorded by attnbench run (or attnbench check)"
        )
        return section
    verdicts = verdicts.sort_values(["variant", "created_at"], kind="stable")
    multi = verdicts.groupby("variant")["gate_key"].nunique().max() > 1
    label = verdicts["variant"] + (" @" + verdicts["gate_key"].str[:8] if multi else "")
    checks = list(dict.fromkeys(verdicts["check_name"]))
    view = pd.DataFrame({"variant": label, "check": verdicts["check_name"], "cell": verdicts.apply(_cell, axis=1)})
    wide = view.pivot_table(index="variant", columns="check", values="cell", aggfunc="first")
    wide = wide.reindex(columns=checks).fillna(MISSING).reset_index()
    wide.columns.name = None
    data_cols = ["variant", "gate_key", "check_name", "status", "figure", "tolerance", "detail", "created_at"]
    section.tables.append(
        Table("trust-gate", "Trust-gate verdicts (variant x check)", verdicts[data_cols].reset_index(drop=True), wide)
    )
    for _, r in verdicts[verdicts["status"].isin(FAILING)].iterrows():
        section.notes.append(f"{r['variant']} FAILED the check {r['check_name']} ({r['status']}): {r['detail']}")
    return section


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
