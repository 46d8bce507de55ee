"""The tuning section's figure: per experiment one small panel of each variant's validation
criterion (loss unless the tuning names accuracy) against the learning rate, log x, one line
per rung of successive halving, the chosen rate marked and a search window's bounds drawn."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")  # no display; must precede any pyplot import (seaborn imports it)

import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from attnbench.report.document import Figure  # noqa: E402
from attnbench.report.figures import Palette  # noqa: E402

_DPI = 110
_COLUMNS = 3  # panels per row
_PANEL = (4.2, 3.3)  # inches per panel


def _panel(ax: Axes, points: pd.DataFrame, palette: Palette, bounds: tuple[float, float] | None, ylabel: str) -> None:
    """One experiment: a line per (variant, rung), the chosen point starred, failed points as x."""
    for variant in sorted(points["variant"].unique()):
        mine = points[points["variant"] == variant]
        colour = palette.get(variant, (0.3, 0.3, 0.3))
        for rung in sorted(mine["rung"].unique()):
            line = mine[(mine["rung"] == rung) & mine["value"].notna()].sort_values("lr")
            first = rung == min(mine["rung"])
            ax.plot(
                line["lr"],
                line["value"],
                color=colour,
                marker="o",
                markersize=4,
                linestyle="-" if first else "--",
                alpha=1.0 if first else 0.6,
                label=variant if first else None,
            )
        for _, row in mine[mine["value"].isna()].iterrows():  # diverged or failed: kept, drawn on the top edge
            ax.plot(row["lr"], 0.97, marker="x", color=colour, markersize=7, transform=ax.get_xaxis_transform())
            ax.annotate(
                str(row["status"]),
                (row["lr"], 0.97),
                xycoords=("data", "axes fraction"),
                xytext=(-6, 0),
                textcoords="offset points",
                va="center",
                ha="right",
                fontsize="x-small",
                color=colour,
            )
        chosen = mine[mine["chosen"] & mine["value"].notna()]
        if not chosen.empty:
            last = chosen[chosen["rung"] == chosen["rung"].max()].iloc[0]
            ax.plot(last["lr"], last["value"], marker="*", color=colour, markersize=14, markeredgecolor="black")
    if bounds is not None:
        for bound, side in zip(bounds, ("lower", "upper"), strict=True):
            ax.axvline(bound, color="0.4", linestyle=":", linewidth=1.2)
            ax.annotate(
                f"{side} bound {bound:g}",
                (bound, 0.9),
                xycoords=("data", "axes fraction"),
                xytext=(3 if side == "lower" else -3, 0),
                textcoords="offset points",
                rotation=90,
                va="top",
                ha="left" if side == "lower" else "right",
                fontsize="x-small",
                color="0.3",
            )
    ax.set_xscale("log")
    lrs = [*points["lr"], *(bounds or ())]
    ax.set_xlim(min(lrs) / 1.6, max(lrs) * 1.6)
    lo, hi = ax.get_xlim()
    if lo > 0 and hi / lo < 30:  # within about a decade the minor ticks carry the labels
        short = FuncFormatter(lambda v, _pos: f"{v:.2g}")
        ax.xaxis.set_major_formatter(short)
        ax.xaxis.set_minor_formatter(short)
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set(xlabel="learning rate (log scale)", ylabel=ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="x-small", loc="best")


def tuning_curves(
    points: pd.DataFrame,
    bounds: dict[str, tuple[float, float]],
    ylabels: dict[str, str],
    palette: Palette,
    title: str,
    slug: str,
) -> Figure | None:
    """points: columns experiment, variant, rung, lr, value (mean over tuning seeds; NaN where no
    seed finished with a finite value), status (e.g. "diverged" for such a point), chosen (the
    rate the final runs use).
    bounds: per experiment, its learning-rate window's declared bounds (where it has one).
    ylabels: per experiment, what ``value`` is."""
    if points.empty:
        return None
    experiments = list(dict.fromkeys(points["experiment"]))
    cols = min(_COLUMNS, len(experiments))
    rows = math.ceil(len(experiments) / cols)
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.8):
        fig = MplFigure(figsize=(_PANEL[0] * cols, _PANEL[1] * rows), layout="constrained")
        axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax, exp in zip(axes, experiments, strict=False):
        _panel(ax, points[points["experiment"] == exp], palette, bounds.get(exp), ylabels.get(exp, "validation loss"))
        ax.set_title(exp, fontsize="medium")
    for ax in axes[len(experiments) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    return Figure(
        slug,
        title,
        buf.getvalue(),
        "Mean over the tuning seeds at each learning rate tried; solid: the first rung (every point at one "
        "budget), dashed: later rungs at larger budgets. Star: the chosen rate. x on the top edge: a point that "
        "diverged or gave no finite value (stored, ranked last). Dotted: a search window's declared bounds.",
    )
