"""Which runs stand for a variant in a training comparison: per (variant, model size), the
grid point with the lowest mean held-out loss over its finished seeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnbench.report.values import grid_point
from attnbench.report.values import is_number
from attnbench.report.values import key_of
from attnbench.report.values import mean_ci


@dataclass(frozen=True)
class PointScore:
    """One grid point of a (variant, model size): mean held-out loss over finished seeds."""

    point: dict[str, Any]
    mean_loss: float | None
    done: int
    total: int


@dataclass(frozen=True)
class Selection:
    """The chosen grid point of one (experiment, variant, model size) and its runs."""

    experiment: str
    variant: str
    model: int
    model_label: str
    point: dict[str, Any]
    runs: pd.DataFrame  # the chosen point's runs, every seed and status
    points: list[PointScore]  # every grid point of the reported runs
    tried: int = 0  # grid points tried in all, tuning rungs included

    @property
    def n_points(self) -> int:
        return max(self.tried, len(self.points))


def model_label(coords: dict[str, Any], config: dict[str, Any]) -> str:
    model = config.get("model") or {}
    d, n = model.get("d_model", coords.get("d_model")), model.get("n_layer", coords.get("n_layer"))
    heads = model.get("n_head")
    return f"d{d} L{n}" + (f" H{heads}" if heads else "")


def _loss(summary: dict[str, Any]) -> float | None:
    v = summary.get("val_loss")
    return float(v) if isinstance(v, (int, float)) and is_number(v) else None


def reported_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a comparison reads: every run but the tuning rungs of successive halving
    (short budgets on few seeds; the survivor's runs at the full budget stand for it)."""
    return runs[pd.Series([c.get("stage") != "tune" for c in runs["coords"]], index=runs.index, dtype=bool)]


def select(runs: pd.DataFrame) -> list[Selection]:
    """One Selection per (experiment, variant, model) of ``runs`` (train-like runs), in
    order of first appearance. A point's score is the mean held-out loss of its runs that
    finished ("done"); points with no finished run are chosen only when no point has one."""
    tried: dict[tuple[str, str, int], set[str]] = {}  # every point tried, tuning rungs included
    for exp, variant, coords in zip(runs["experiment"], runs["variant"], runs["coords"]):
        tried.setdefault((str(exp), str(variant), int(coords.get("model", 0))), set()).add(key_of(grid_point(coords)))
    runs = reported_runs(runs)
    groups: dict[tuple[str, str, int], dict[str, list[int]]] = {}
    for pos, (exp, variant, coords) in enumerate(zip(runs["experiment"], runs["variant"], runs["coords"])):
        key = (str(exp), str(variant), int(coords.get("model", 0)))
        groups.setdefault(key, {}).setdefault(key_of(grid_point(coords)), []).append(pos)
    out: list[Selection] = []
    for (exp, variant, model), points in groups.items():
        scored: list[tuple[PointScore, list[int]]] = []
        for positions in points.values():
            sub = runs.iloc[positions]
            done = sub[sub["status"] == "done"]
            m = mean_ci(_loss(s) for s in done["summary"])
            scored.append((PointScore(grid_point(sub.iloc[0]["coords"]), m.mean, len(done), len(sub)), positions))
        finite = [s for s in scored if s[0].mean_loss is not None]
        best = min(finite, key=lambda s: s[0].mean_loss or 0.0) if finite else scored[0]
        first = runs.iloc[best[1][0]]
        out.append(Selection(exp, variant, model, model_label(first["coords"], first["config"]), best[0].point,
                             runs.iloc[best[1]], [s[0] for s in scored],
                             len(tried.get((exp, variant, model), ()))))
    return out
