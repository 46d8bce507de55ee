"""The checkpoints a suite's runs kept, each with its variant, options, experiment, seed, grid
point, cell key and file, and whether the protocol chose it (``attnbench checkpoints``); and
the chosen run of one variant in one experiment (``attnbench export --best``)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.errors import CheckpointError
from attnbench.report.load import StoreData
from attnbench.report.selection import Selection, fixed_options, model_label, select
from attnbench.report.values import grid_point
from attnbench.store.checkpoint_paths import checkpoint_candidates, locate_checkpoint

CHOSEN_RUN, CHOSEN_POINT = "run", "point"  # the run `export --best` takes; another seed at the chosen point


@dataclass(frozen=True)
class CheckpointRow:
    """One stored run that kept a checkpoint."""

    suite: str
    experiment: str
    kind: str
    variant: str
    options: dict[str, Any]  # the variant's options, less those the grid point sweeps
    model: str  # "d16 L1 H2"
    seed: int | None
    point: dict[str, Any]  # the grid point (swept settings and options)
    key: str
    recorded: str  # the path the run recorded
    path: Path | None  # the file, resolved; None when it is gone
    chosen: str = ""  # CHOSEN_RUN, CHOSEN_POINT or ""


def _chosen(runs: pd.DataFrame) -> dict[str, str]:
    """Cell key -> CHOSEN_RUN / CHOSEN_POINT for the train runs at each variant's chosen point."""
    out: dict[str, str] = {}
    for sel in select(runs[runs["kind"] == "train"]) if not runs.empty else []:
        best = sel.chosen_run()
        for key in sel.runs["cell_key"]:
            out[str(key)] = CHOSEN_RUN if best is not None and key == best["cell_key"] else CHOSEN_POINT
    return out


def checkpoint_rows(data: StoreData) -> list[CheckpointRow]:
    """Every run of ``data``'s suite that recorded a checkpoint, in the order they were stored."""
    runs = data.runs
    chosen = _chosen(runs)
    rows = []
    for _, r in runs.iterrows():
        recorded = (r["summary"] or {}).get("checkpoint")
        if not recorded:
            continue
        rows.append(
            CheckpointRow(
                str(r["suite"]),
                str(r["experiment"]),
                str(r["kind"]),
                str(r["variant"]),
                fixed_options(str(r["variant"]), r["coords"], r["config"]),
                model_label(r["coords"], r["config"]),
                None if pd.isna(r["seed"]) else int(r["seed"]),
                grid_point(r["coords"]),
                str(r["cell_key"]),
                str(recorded),
                locate_checkpoint(data.path, recorded),
                chosen.get(str(r["cell_key"]), ""),
            )
        )
    return rows


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _selection(data: StoreData, variant: str, experiment: str | None) -> Selection:
    """The one Selection of ``variant`` in ``experiment`` (inferred when the variant trained in one)."""
    train = data.runs_of("train")
    where = f"suite {data.suite!r} of store {data.path}"
    experiments = list(dict.fromkeys(train["experiment"]))
    if not experiments:
        raise CheckpointError(
            f"{where} has no train runs, so no chosen run; pass --suite (its suites: "
            f"{', '.join(data.suites) or 'none'})"
        )
    if experiment is None:
        having: list[str] = list(dict.fromkeys(train.loc[train["variant"] == variant, "experiment"]))
        if len(having) > 1:
            raise CheckpointError(
                f"variant {variant!r} trained in several experiments of {where} "
                f"({', '.join(having)}); name one with --experiment"
            )
        if not having:
            trained = list(dict.fromkeys(train["variant"]))
            raise CheckpointError(
                f"variant {variant!r} has no train runs in {where}"
                f"{_did_you_mean(variant, trained)}; its variants: {', '.join(trained)}"
            )
        experiment = having[0]
    if experiment not in experiments:
        raise CheckpointError(
            f"experiment {experiment!r} has no train runs in {where}"
            f"{_did_you_mean(experiment, experiments)}; its train experiments: "
            f"{', '.join(experiments)}"
        )
    runs = train[train["experiment"] == experiment]
    variants = list(dict.fromkeys(runs["variant"]))
    sels = [s for s in select(runs) if s.variant == variant or s.label == variant]
    if not sels:
        raise CheckpointError(
            f"variant {variant!r} has no runs in experiment {experiment!r} of {where}"
            f"{_did_you_mean(variant, variants)}; its variants: {', '.join(variants)}"
        )
    if len(sels) > 1:
        which = "; ".join(f"{s.label} at {s.model_label}" for s in sels)
        raise CheckpointError(
            f"variant {variant!r} has {len(sels)} chosen runs in experiment {experiment!r} "
            f"({which}): one per model size or option set. List them with `attnbench "
            f"checkpoints --chosen --variant {variant}` and export one by its path"
        )
    return sels[0]


def best_checkpoint(data: StoreData, variant: str, experiment: str | None = None) -> CheckpointRow:
    """The checkpoint of the protocol's chosen run of ``variant`` in ``experiment`` (its grid
    point chosen on validation loss, then its seed with the lowest validation loss).

    Raises CheckpointError for an unknown experiment or variant, a variant with several
    chosen runs (model sizes, option sets), no finished run, or no checkpoint file."""
    sel = _selection(data, variant, experiment)
    best = sel.chosen_run()
    what = f"{sel.label} in experiment {sel.experiment!r}"
    if best is None:
        raise CheckpointError(
            f"{what} has no finished run at its chosen point, so no chosen run "
            f"(statuses: {', '.join(sorted(set(sel.runs['status'])))}); run the suite again"
        )
    row = next((r for r in checkpoint_rows(data) if r.key == best["cell_key"]), None)
    if row is None:
        raise CheckpointError(
            f"the chosen run of {what} (seed {int(best['seed'])}, key {best['cell_key']}) kept no "
            "checkpoint: set train.checkpoint: true (the default) and run the suite again"
        )
    if row.path is None:
        looked = " or ".join(str(p) for p in checkpoint_candidates(data.path, row.recorded))
        raise CheckpointError(
            f"the chosen run of {what} (seed {row.seed}, key {row.key}) recorded checkpoint "
            f"{row.recorded}, but it is not there (looked at {looked}); the checkpoints folder "
            "was moved or deleted. Re-train the cell (delete its run from the store and run "
            "the suite again)"
        )
    return row
