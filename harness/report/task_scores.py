"""Synthetic-task scores by difficulty: per variant, task, metric and difficulty coordinates,
the mean over seeds of one split (the test split where the runs scored one), answer counts
summed, and accuracy against the main difficulty axis as a figure."""

from __future__ import annotations

import pandas as pd

from attnbench.report import figures
from attnbench.report.document import Figure, Table
from attnbench.report.load import StoreData
from attnbench.report.selection import Selection
from attnbench.report.values import MeanCI, ci_text, is_number, mean_ci

_NOT_TASK_METRICS = ("loss", "ppl", "bpb", "length_accuracy", "length_exact", "length_status")  # lengths: own section
_NOT_COORDS = ("split", "task", "null_predictor", "null_levels")  # tags of a task row that are no difficulty


def task_rows(data: StoreData, sels: list[Selection]) -> pd.DataFrame:
    """Per-seed task evaluation rows (accuracy and task-defined metrics) of chosen runs."""
    rows = []
    for s in sels:
        done = s.runs[s.runs["status"] == "done"]
        res = data.results_of(done["id"])
        seeds = dict(zip(done["id"], done["seed"], strict=True))
        for _, r in res.iterrows():
            tags = r["tags"]
            if "task" not in tags or r["name"] in _NOT_TASK_METRICS:
                continue
            coords = {  # the difficulty coordinates: scalar tags, not what annotates a null row
                k: v for k, v in tags.items() if k not in _NOT_COORDS and not isinstance(v, (dict, list, tuple))
            }
            rows.append(
                {
                    "variant": s.label,
                    "split": tags.get("split", "val"),
                    "task": tags["task"],
                    "metric": r["name"],
                    "count": r["unit"] == "count",  # e.g. answers: how many positions an accuracy scored
                    "seed": seeds[r["run_id"]],
                    "value": r["value"],
                    **coords,
                }
            )
    return pd.DataFrame(rows)


_TASK_FIELDS = ("variant", "split", "task", "metric", "count", "seed", "value")
_SPLIT_NAME = {"test": "test split", "val": "validation split"}


def task_section(exp: str, rows: pd.DataFrame, palette: figures.Palette) -> tuple[list[Table], list[Figure]]:
    """The scores of one split, per difficulty: the test split where the runs scored one (the split
    the Summary decides on; validation chose the grid point), else validation. Scores are the mean
    over seeds with its 95% interval; counts (answers scored) are summed over the seeds."""
    split = "test" if (rows["split"] == "test").any() else "val"
    rows = rows[rows["split"] == split]
    coords = [c for c in rows.columns if c not in _TASK_FIELDS]
    keys = ["variant", "task", "metric", *coords]
    out = []
    for key, g in rows.groupby(keys, dropna=False, sort=True):
        accuracy = dict(zip(keys, key, strict=True))["metric"] == "accuracy"
        m = mean_ci(g["value"], bounds=(0.0, 1.0) if accuracy else None)
        total = float(pd.to_numeric(g["value"], errors="coerce").sum()) if g["count"].all() else None
        out.append(
            {
                **dict(zip(keys, key, strict=True)),
                "split": split,
                "mean": m.mean,
                "ci95_lo": m.lo,
                "ci95_hi": m.hi,
                "seeds": m.n,
                "total": total,  # counts only: the sum over the seeds
            }
        )
    data = pd.DataFrame(out)
    view = data[keys].copy()
    view["value, mean ± 95% CI"] = [
        f"{r['total']:.0f} in all (n={int(r['seeds'])})" if is_number(r["total"]) else ci_text(c)
        for c, (_, r) in zip(_cis(data), data.iterrows(), strict=True)
    ]
    table = Table(
        f"{exp}-tasks",
        f"{exp}: synthetic-task scores by difficulty ({_SPLIT_NAME.get(split, split)})",
        data,
        view,
        f"One split, never pooled: {_SPLIT_NAME.get(split, split)}"
        + (" (the split the Summary decides on)" if split == "test" else " (the runs scored no test split)")
        + "; scores are the mean over seeds with a 95% Student-t interval, n = seeds; answer counts are summed "
        "over the seeds.",
    )
    figs = []
    acc = rows[rows["metric"] == "accuracy"]
    varying = [c for c in coords if acc[c].nunique(dropna=True) > 1]
    if not acc.empty and coords:
        x = next((c for c in ("num_kv_pairs", *varying, *coords) if c in coords), coords[0])
        fig = figures.recall(
            acc.rename(columns={"value": "accuracy"}),
            x,
            palette,
            f"{exp}: accuracy against {x.replace('_', ' ')} ({_SPLIT_NAME.get(split, split)})",
            f"{exp}-recall",
        )
        figs = [fig] if fig else []
    return [table], figs


def _cis(data: pd.DataFrame) -> list[MeanCI]:
    return [MeanCI(r["mean"], r["ci95_lo"], r["ci95_hi"], int(r["seeds"])) for _, r in data.iterrows()]
