"""Quality against cost: each variant one point per experiment (its test metric, mean over
seeds with the 95% interval as bars) against its training-step time and its state size,
with the Pareto front (no other variant is both cheaper and better) drawn through it."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import NullFormatter

from attnbench.report.document import Figure
from attnbench.report.figures import Palette, _png
from attnbench.report.values import is_number

COSTS = (("step_time_s", "train-step time (s, log)"), ("state_bytes", "decode state (bytes, log)"))


def pareto_front(points: list[tuple[float, float]], higher_is_better: bool) -> list[int]:
    """Indices of the points no other point dominates (cost no larger, quality no worse, one
    strictly), ordered by cost."""
    def better(a: float, b: float) -> bool:
        return a > b if higher_is_better else a < b

    front = []
    for i, (c, q) in enumerate(points):
        dominated = any((c2 <= c and not better(q, q2) and (c2 < c or better(q2, q)))
                        for j, (c2, q2) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def tradeoff_figure(rows: pd.DataFrame, palette: Palette) -> Figure | None:
    """``rows``: experiment, variant, metric, value_mean/lo/hi, step_time_s, state_bytes."""
    experiments = list(dict.fromkeys(rows["experiment"]))
    if not experiments:
        return None
    fig = MplFigure(figsize=(6.4, 2.3 * len(experiments)), layout="constrained")
    axes = fig.subplots(len(experiments), len(COSTS), squeeze=False)
    for r, exp in enumerate(experiments):
        sub = rows[rows["experiment"] == exp]
        metric = sub["metric"].iloc[0]
        for c, (cost, label) in enumerate(COSTS):
            ax = axes[r][c]
            pts = [(float(x), float(y), v, lo, hi) for x, y, v, lo, hi in zip(
                sub[cost], sub["value_mean"], sub["variant"], sub["value_lo"], sub["value_hi"])
                if is_number(x) and x > 0 and is_number(y)]
            for x, y, v, lo, hi in pts:
                err = [[y - lo], [hi - y]] if is_number(lo) and is_number(hi) else None
                ax.errorbar([x], [y], yerr=err, fmt="o", ms=5, capsize=2, color=palette.get(v, "#555"))
                ax.annotate(v, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            front = pareto_front([(p[0], p[1]) for p in pts], metric == "accuracy")
            if len(front) > 1:
                ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="#888", lw=1,
                        label="Pareto front")
                ax.legend(fontsize=7, loc="best")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels of a short log range overlap
            ax.set_xlabel(label, fontsize=8)
            ax.set_ylabel(f"{exp}: test {metric}" + (" (higher better)" if metric == "accuracy" else " (lower better)"),
                          fontsize=8)
            ax.tick_params(labelsize=7)
            if pts and all(math.isfinite(p[0]) for p in pts):
                ax.margins(x=0.25)
    return Figure("tradeoff", "Quality against cost", _png(fig),
                  "Each point: a variant at its chosen grid point, test metric as the mean over seeds with its 95% "
                  "interval; cost: training-step time at the longest length timed for every variant, and the "
                  "fp32 decode state at the training length. Dashed: the Pareto front.")
