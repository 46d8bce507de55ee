"""Experiments none of whose runs finished: each is one section that says "failed" and points
to its lines in the Problems list; the section builders see only the experiments that ran."""

from __future__ import annotations

import dataclasses
from collections import Counter

from attnbench.decision_words import NO_RUN_FINISHED
from attnbench.report.document import Section
from attnbench.report.load import StoreData

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
