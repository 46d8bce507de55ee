"""The capability battery's score (MAD's protocol, Poli et al. 2024), read from stored runs.

A battery is a set of train experiments tagged ``battery: TIER`` (the tag lands in every
cell's coords): each experiment trains one task at one difficulty setting, its ``grid``
sweeps the learning rate (and any other setting). Per (tier, variant, setting):

* each grid point's accuracy on answers is averaged over seeds;
* the point with the best mean validation accuracy is chosen, and its accuracy on the
  test split is reported (validation when the runs have no test split: then, as in MAD,
  the best of the grid is reported on the data it was chosen on, an optimistic number);
* the battery score is the mean of those best accuracies over every setting of every task.

The interval is a 95% percentile bootstrap at the chosen points: each replicate resamples
each setting's seeds with replacement and redraws each seed's accuracy as Binomial(n, acc)/n
over its n scored answers. It covers evaluation-sample and seed noise, not the choice of
the grid point. Tier agreement is Spearman's rank correlation of the variants' scores, with its
exact permutation p (every ordering of the variants, or a seeded sample past eight).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from attnbench.report.load import StoreData
from attnbench.report.values import grid_point, point_text
from attnbench.stats.exact import spearman_permutation_p
from attnbench.stats.learned import row_learned

BOOTSTRAP = 2000
CELL_COLUMNS = ["tier", "variant", "task", "setting", "options", "point", "seed", "val", "test", "answers", "null"]


def _split_value(results: pd.DataFrame, name: str, split: str) -> float | None:
    at = pd.Series([t.get("split", "val") == split for t in results["tags"]], index=results.index, dtype=bool)
    rows = results[(results["name"] == name) & at]
    values = [float(v) for v in rows["value"] if v is not None and not math.isnan(float(v))]
    if not values:
        return None
    return sum(values) if name == "answers" else statistics.fmean(values)


def battery_cells(data: StoreData) -> pd.DataFrame:
    """One row per finished battery run: its tier, variant, task, setting (the experiment),
    grid point, seed, validation and test accuracy, and the answers the accuracy counts."""
    results = {int(str(run_id)): rows for run_id, rows in data.results.groupby("run_id")}
    rows = []
    for run in data.runs_of("train").to_dict("records"):
        coords: dict[str, Any] = run["coords"]
        if not coords.get("battery") or run["status"] != "done" or int(run["id"]) not in results:
            continue
        rows.append(_cell_row(run, coords, results[int(run["id"])]))
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def _cell_row(run: dict[Any, Any], coords: dict[str, Any], results: pd.DataFrame) -> dict[str, Any]:
    data = run["config"].get("data") or {}
    options = data.get("task_options") or {}
    test = _split_value(results, "accuracy", "test")
    split = "test" if test is not None else "val"
    return {
        "tier": coords["battery"],
        "variant": run["variant"],
        "task": data.get("task") or "",
        "setting": run["experiment"],
        "options": ", ".join(f"{k}={v}" for k, v in sorted(options.items())),
        "point": point_text(grid_point(coords)),
        "seed": run["seed"],
        "val": _split_value(results, "accuracy", "val"),
        "test": test,
        "answers": _split_value(results, "answers", split),
        "null": _split_value(results, "guess_accuracy", split),  # the measured null level on that split
    }


def best_over_grid(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (tier, variant, task, setting): the chosen grid point, its seeds' reported
    accuracies and answer counts, and their mean (``best``)."""
    rows = []
    for (tier, variant, task, setting), group in cells.groupby(["tier", "variant", "task", "setting"], sort=False):
        scored = group.dropna(subset=["val"])
        if scored.empty:
            continue
        choice = scored.groupby("point", sort=False)["val"].mean().idxmax()
        chosen = scored[scored["point"] == choice]
        on_test = chosen["test"].notna().all()
        accs = [float(a) for a in (chosen["test"] if on_test else chosen["val"])]
        nulls = [float(v) for v in chosen["null"] if v is not None and not math.isnan(float(v))]
        answers = [None if a is None or math.isnan(a) else int(a) for a in chosen["answers"]]
        null = statistics.fmean(nulls) if nulls else None
        counts = {i: float(n) for i, n in enumerate(answers) if n}
        rows.append(
            {
                "tier": tier,
                "variant": variant,
                "task": task,
                "setting": setting,
                "options": chosen["options"].iloc[0],
                "point": choice,
                "points": scored["point"].nunique(),
                "split": "test" if on_test else "val",
                "seeds": len(accs),
                "best": statistics.fmean(accs),
                "accs": accs,
                "answers": answers,
                "null": null,
                "learned": row_learned(dict(enumerate(accs)), null, True, counts).text(),
            }
        )
    return pd.DataFrame(rows)


def _bootstrap(settings: list[tuple[list[float], list[int | None]]], rng: np.random.Generator) -> np.ndarray:
    """(BOOTSTRAP,) replicate scores: per setting, seeds resampled and accuracies redrawn."""
    means = []
    for accs, answers in settings:
        a = np.asarray(accs, dtype=float)  # (K,)
        idx = rng.integers(0, len(a), size=(BOOTSTRAP, len(a)))  # (B, K) seeds with replacement
        draw = a[idx]  # (B, K)
        if all(n for n in answers):
            n = np.asarray(answers, dtype=np.int64)[idx]  # (B, K)
            draw = rng.binomial(n, draw) / n
        means.append(draw.mean(axis=1))  # (B,)
    return np.mean(means, axis=0)


def scores(best: pd.DataFrame) -> pd.DataFrame:
    """Per (tier, variant): the battery score (mean best accuracy), its bootstrap interval,
    and how many settings and tasks it averages."""
    rows = []
    for (tier, variant), group in best.groupby(["tier", "variant"], sort=False):
        settings = list(zip(group["accs"], group["answers"], strict=True))
        varies = any(len(a) > 1 for a, _ in settings) or any(all(n) for _, n in settings)
        reps = _bootstrap(settings, np.random.default_rng(0)) if varies else None
        rows.append(
            {
                "tier": tier,
                "variant": variant,
                "score": float(group["best"].mean()),
                "ci_low": float(np.percentile(reps, 2.5)) if reps is not None else None,
                "ci_high": float(np.percentile(reps, 97.5)) if reps is not None else None,
                "settings": len(group),
                "tasks": group["task"].nunique(),
                "split": "/".join(sorted(set(group["split"]))),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Agreement:
    """Spearman's rank correlation of two tiers' scores over the variants both ran."""

    tiers: tuple[str, str]
    n: int
    rho: float | None  # None when fewer than 3 shared variants (or no spread to rank)
    p_value: float | None  # two-sided exact permutation p of rho (no asymptotic t at a handful of variants)


def tier_agreement(table: pd.DataFrame) -> list[Agreement]:
    """Every pair of tiers in ``table`` (a ``scores`` frame), in order of first appearance."""
    tiers = list(dict.fromkeys(table["tier"]))
    out = []
    for i, a in enumerate(tiers):
        for b in tiers[i + 1 :]:
            left = table[table["tier"] == a].set_index("variant")["score"]
            right = table[table["tier"] == b].set_index("variant")["score"]
            shared = sorted(set(left.index) & set(right.index))
            rho = p = None
            x, y = left[shared].to_numpy(), right[shared].to_numpy()
            if len(shared) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
                rho = float(stats.spearmanr(x, y).statistic)  # pyright: ignore[reportAttributeAccessIssue]
                p = spearman_permutation_p(x, y)
            out.append(Agreement((a, b), len(shared), rho, p))
    return out
