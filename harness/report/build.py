"""Assembling a ``Report`` from a suite's rows: the problems first, then one section per
experiment kind (each saying what is missing when the store has none; an experiment none of
whose runs finished is one section saying "failed", and the builders see only those that
ran), the trust gate and provenance."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter

from attnbench.decision_words import NO_RUN_FINISHED
from attnbench.report import figures
from attnbench.report.anchors import anchor_section
from attnbench.report.battery import battery_answer, battery_sections
from attnbench.report.comparison import comparison_sections
from attnbench.report.document import Report, Section
from attnbench.report.downstream import finetune_sections, lm_eval_sections
from attnbench.report.expectations import expectations_section
from attnbench.report.gate import gate_section, provenance_section
from attnbench.report.grid import grid_section
from attnbench.report.headline import headline_section
from attnbench.report.load import StoreData
from attnbench.report.longcontext import longcontext_sections
from attnbench.report.problems import find_notes, find_problems
from attnbench.report.scaling import scaling_sections
from attnbench.report.speed import speed_sections
from attnbench.report.time_to_learn import time_to_learn_sections
from attnbench.report.training import train_sections, variant_labels
from attnbench.report.tuning import tuning_section

EMPTY_SUITE = "empty"
# The section title of each experiment kind (the builders title theirs "<title>: <experiment>").
KIND_TITLES = {
    "train": "Training",
    "speed": "Speed and memory",
    "scaling": "Scaling",
    "lm_eval": "Downstream (lm-eval)",
    "finetune": "Fine-tuning",
}


def failed_experiments(data: StoreData) -> dict[tuple[str, str], Counter[str]]:
    """(kind, experiment) -> its runs' statuses, for experiments with runs and none finished."""
    out: dict[tuple[str, str], Counter[str]] = {}
    runs = data.runs[data.runs["kind"].isin(list(KIND_TITLES))]
    for (kind, exp), group in runs.groupby(["kind", "experiment"], sort=False):
        if not (group["status"] == "done").any():
            out[(str(kind), str(exp))] = Counter(str(s) for s in group["status"])
    return out


def without_failed(data: StoreData) -> StoreData:
    """``data`` less the runs of failed experiments (problems and provenance still read them all)."""
    failed = failed_experiments(data)
    if not failed:
        return data
    keep = [(k, e) not in failed for k, e in zip(data.runs["kind"], data.runs["experiment"], strict=True)]
    return dataclasses.replace(data, runs=data.runs[keep])


def failed_sections(data: StoreData) -> dict[str, list[Section]]:
    """Per kind, one section per failed experiment of that kind."""
    out: dict[str, list[Section]] = {}
    for (kind, exp), statuses in failed_experiments(data).items():
        runs = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        out.setdefault(kind, []).append(
            Section(
                f"{KIND_TITLES[kind]}: {exp}", failed=f"{NO_RUN_FINISHED.format(experiment=exp)} ({runs}); see Problems"
            )
        )
    return out


def _summary(data: StoreData) -> list[tuple[str, str]]:
    runs = data.runs
    kinds = Counter(runs["kind"])
    lines = [
        ("suite", data.suite or "(none)"),
        ("store", str(data.path)),
        ("runs", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"),
    ]
    if not runs.empty:
        labels = variant_labels(data)
        lines.append(("variants", ", ".join(labels[v] for v in sorted(set(runs["variant"])))))
    others = [s for s in data.suites if s != data.suite]
    if others:
        lines.append(("other suites in this store", ", ".join(others)))
    return lines


def suite_description(data: StoreData) -> str:
    """The suite's ``description`` as its latest run recorded it (provenance); '' where none did."""
    if data.runs.empty or "provenance" not in data.runs:
        return ""
    found = [p.get("suite_description") for p in data.runs.sort_values("id")["provenance"] if isinstance(p, dict)]
    latest = next((d for d in reversed(found) if isinstance(d, str)), "")
    return " ".join(latest.split())  # one line


def build_report(data: StoreData) -> Report:
    """The report of ``data`` (figures rendered to PNG here)."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    summary = [*_summary(data), ("generated", now)]
    if data.runs.empty:
        section = Section(
            "No runs",
            missing=(
                "this store has no runs: run a suite first (e.g. attnbench run suites/smoke.yaml "
                f"--store {data.path}), then make the report again"
            ),
        )
        shown = [section, gate_section(data)]  # rows skipped as damaged still show, under Problems
        return Report(data.suite or EMPTY_SUITE, str(data.path), now, summary, find_problems(data), shown)
    palette = figures.make_palette(data.all_variants)
    ran, failed = without_failed(data), failed_sections(data)  # sections of the kinds the suite has, only
    sections: list[Section] = [
        *comparison_sections(ran),
        *expectations_section(ran),
        *anchor_section(ran),
        *train_sections(ran, palette),
        *failed.get("train", []),
        *time_to_learn_sections(ran),
        *longcontext_sections(ran, palette),
        *tuning_section(data),  # a tuning whose every point failed says so: its experiment is not in ran
        *grid_section(ran),
        *battery_sections(ran, palette),
        *speed_sections(ran, palette),
        *failed.get("speed", []),
        *scaling_sections(ran, palette),
        *failed.get("scaling", []),
        *lm_eval_sections(ran),
        *failed.get("lm_eval", []),
        *finetune_sections(ran, palette),
        *failed.get("finetune", []),
        gate_section(data),
        provenance_section(data),
    ]
    return Report(
        data.suite or EMPTY_SUITE,
        str(data.path),
        now,
        summary,
        find_problems(data),
        sections,
        battery_answer(ran, palette) or headline_section(ran, palette),
        find_notes(data),
        suite_description(data),
    )
