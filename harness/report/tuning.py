"""The tuning trail of successive halving: per variant, each rung's points, budget and mean
validation loss, and which point went on (the choice reads validation data only)."""

from __future__ import annotations

import statistics

import pandas as pd

from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.values import grid_point, is_number, num, point_text


def _budget(config: dict) -> str:
    budget = (config.get("train") or {}).get("budget") or {}
    return ", ".join(f"{v:g} {k}" for k, v in budget.items() if v is not None)


def tuning_section(data: StoreData) -> list[Section]:
    train = data.runs_of("train")
    rows = []
    for (exp, variant), runs in train.groupby(["experiment", "variant"], sort=False):
        tune = runs[[c.get("stage") == "tune" for c in runs["coords"]]]
        if tune.empty:
            continue
        final = {point_text(grid_point(c)) for c in runs["coords"] if c.get("stage") == "final"}
        rungs = sorted({int(c["rung"]) for c in tune["coords"]})
        for rung in rungs:
            at = tune[[int(c["rung"]) == rung for c in tune["coords"]]]
            later = {point_text(grid_point(c)) for c in tune["coords"] if int(c["rung"]) > rung} or final
            points: dict[str, list[float]] = {}
            for coords, summary in zip(at["coords"], at["summary"], strict=True):
                loss = summary.get("val_loss")
                points.setdefault(point_text(grid_point(coords)), []).append(loss if is_number(loss) else float("inf"))
            for point, losses in sorted(points.items(), key=lambda kv: statistics.fmean(kv[1])):
                rows.append(
                    {
                        "experiment": exp,
                        "variant": variant,
                        "rung": rung,
                        "budget": _budget(at.iloc[0]["config"]),
                        "point": point,
                        "seeds": len(losses),
                        "val_loss": statistics.fmean(losses),
                        "went_on": point in later,
                    }
                )
    if not rows:
        return []
    raw = pd.DataFrame(rows)
    view = raw.assign(val_loss=[num(v) for v in raw["val_loss"]], went_on=["yes" if w else "" for w in raw["went_on"]])
    return [
        Section(
            "Tuning: successive halving",
            intro=(
                "Each rung trains every remaining grid point on the tuning seeds at its budget; the best points by "
                "mean validation loss go on at a larger budget, and the survivor runs at the full budget on every seed "
                "(the runs the summary reports)."
            ),
            tables=[Table("tuning", "Tuning trail per variant", raw, view)],
        )
    ]
