"""Quality against cost: each variant one point per experiment (its test metric, mean over
seeds with the 95% interval as bars) against its training-step time and its state size,
with the Pareto front (no other variant is both cheaper and better) drawn through it. Variants
that have not learned (not beyond their null level) are grey and take no part in the front.
Without a timed train step (no speed experiment in the suite) there is no time panel, and the
caption says so."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from attnbench.plotting import png as _png
from attnbench.report.document import Figure
from attnbench.report.figures import Palette
from attnbench.report.values import bytes_text, is_number, seconds_text

UNLEARNED = (0.78, 0.78, 0.78)  # grey: a variant not beyond its null level
NO_SPEED = "No timing"  # the caption's words where no variant was timed


def pareto_front(points: list[tuple[float, float]], higher_is_better: bool) -> list[int]:
    """Indices of the points no other point dominates (cost no larger, quality no worse, one
    strictly), ordered by cost."""

    def better(a: float, b: float) -> bool:
        return a > b if higher_is_better else a < b

    front = []
    for i, (c, q) in enumerate(points):
        dominated = any(
            (c2 <= c and not better(q, q2) and (c2 < c or better(q2, q))) for j, (c2, q2) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def _panel(ax, sub: pd.DataFrame, cost: str, palette: Palette) -> None:
    """One experiment against one cost: points with interval bars, labelled, and the front."""
    metric = sub["metric"].iloc[0]
    unlearned = sub["unlearned"] if "unlearned" in sub else [False] * len(sub)
    pts = [
        (float(x), float(y), v, lo, hi, bool(off))
        for x, y, v, lo, hi, off in zip(
            sub[cost], sub["value_mean"], sub["variant"], sub["value_lo"], sub["value_hi"], unlearned, strict=True
        )
        if is_number(x) and x > 0 and is_number(y)
    ]
    learned = [i for i, p in enumerate(pts) if not p[5]]
    front = [learned[j] for j in pareto_front([(pts[i][0], pts[i][1]) for i in learned], metric == "accuracy")]
    if len(front) > 1:
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="#999", lw=1, zorder=1)
    for i, (x, y, v, lo, hi, off) in enumerate(pts):
        err = [[y - lo], [hi - y]] if is_number(lo) and is_number(hi) else None
        ax.errorbar(
            [x],
            [y],
            yerr=err,
            fmt="o",
            ms=6 if i in front else 4.5,
            capsize=2,
            zorder=2,
            color=UNLEARNED if off else palette.get(v, (0.3, 0.3, 0.3)),
            mec="black" if i in front else "none",
            mew=0.8,
        )
        label = f"{v} (not learned)" if off else v
        ax.annotate(label, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points", color="#888" if off else None)
    ax.set_xscale("log")
    ax.tick_params(labelsize=7)
    if pts:
        ax.margins(x=0.3)
    # labelled ticks at powers of 2 (bytes) or at 1, 2, 5 x 10^k (seconds), at most about six
    state = cost == "state_bytes"
    lo, hi = ax.get_xlim()
    subs = (1.0, 2.0, 5.0) if state or hi / lo > 4 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)  # >= 2 labels
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=4) if state else LogLocator(10, subs, numticks=6))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: (bytes_text if state else seconds_text)(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if metric == "accuracy":  # an interval of a mean may pass 1: the axis shows what accuracy can be
        ax.set_ylim(max(-0.02, ax.get_ylim()[0]), 1.02)


def tradeoff_figure(rows: pd.DataFrame, palette: Palette, T: int | None = None) -> Figure | None:
    """``rows``: experiment, variant, metric, value_mean/lo/hi, step_time_s, state_bytes; ``T``
    the length the step times were measured at."""
    experiments = list(dict.fromkeys(rows["experiment"]))
    if not experiments:
        return None
    costs = (("step_time_s", f"train-step time at T={T}" if T else "train-step time"), ("state_bytes", "decode state"))
    timed = "step_time_s" in rows and any(is_number(t) and t > 0 for t in rows["step_time_s"])
    if not timed:  # an empty panel would say nothing: the caption says why there is none
        costs = costs[1:]
    fig = MplFigure(figsize=(0.4 + 2.5 * len(costs), 0.3 + 2.0 * len(experiments)), layout="constrained")
    axes = fig.subplots(len(experiments), len(costs), squeeze=False)
    for r, exp in enumerate(experiments):
        sub = rows[rows["experiment"] == exp]
        metric = sub["metric"].iloc[0]
        for c, (cost, label) in enumerate(costs):
            ax = axes[r][c]
            _panel(ax, sub, cost, palette)
            ax.set_xlabel(label + ", log", fontsize=8)
            if c == 0:
                ax.set_ylabel(
                    f"{exp}: test {metric}\n({'higher' if metric == 'accuracy' else 'lower'} is better)", fontsize=8
                )
    front = [Line2D([], [], ls="--", color="#999", marker="o", mec="black", mfc="white", label="Pareto front")]
    fig.legend(handles=front, loc="outside upper right", fontsize=7, frameon=False)
    cost = (
        "cost: train-step time at the longest length timed for every variant, and the fp32 decode state at "
        "the training length"
        if timed
        else f"cost: the fp32 decode state at the training length. {NO_SPEED}: no speed experiment in this "
        "suite (none timed a train step), so there is no train-step time panel"
    )
    return Figure(
        "tradeoff",
        "Quality against cost",
        _png(fig),
        "Each point: a variant at its chosen grid point, test metric as the mean over seeds with its 95% "
        f"interval; {cost}. Dashed through outlined points: the Pareto front. Grey, "
        "marked 'not learned': variants whose test metric is not beyond its null level (no front).",
    )
