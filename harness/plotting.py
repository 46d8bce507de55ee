"""Matplotlib for every figure attnbench draws. The Agg backend is set here, once, before pyplot
or seaborn load (no display): a module that draws imports this one. Report figures are drawn on
``Figure`` objects (no pyplot state) and returned as PNG bytes; the axis and legend helpers they
share live here too. Matplotlib's cache and configuration folder follow ``MPLCONFIGDIR``."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede any pyplot import (seaborn imports it)

import seaborn as sns  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator  # noqa: E402

__all__ = ["Axes", "Figure", "legend", "log_x_labels", "panels", "plain_log_y", "plt", "png", "ticks_at", "vline"]
DPI = 110
LEGEND_COLUMNS = 4  # a shared legend's columns, below the panels
LEGEND_ROW_INCHES = 0.22


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def panels(
    n: int, columns: int, size: tuple[float, float], font_scale: float = 0.9, **share: Any
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` panels of ``size`` inches, ``columns`` to a row (seaborn's whitegrid): its
    ``n`` axes row by row (the last row's unused places hidden)."""
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=font_scale):
        fig = Figure(figsize=(size[0] * cols, size[1] * rows), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False, **share)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:n]


def ticks_at(ax: Axes, values: Iterable[float]) -> None:
    """x ticks exactly at the measured values, labelled as plain integers."""
    vals = sorted({float(v) for v in values})
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{v:,.0f}" for v in vals], rotation=45 if len(vals) > 6 else 0)


def plain_log_y(ax: Axes) -> None:
    """Within one decade a log axis labels its minor ticks: write them as plain numbers."""
    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 10:
        plain = FuncFormatter(lambda v, _pos: f"{v:.3g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)


def log_x_labels(ax: Axes) -> None:
    """Label only decades on a wide log x axis (minor labels collide); within about a
    decade, label the minor ticks too, in short scientific form."""
    lo, hi = ax.get_xlim()
    if lo > 0 and hi / lo < 30:
        short = FuncFormatter(lambda v, _pos: f"{v:.2g}")
        ax.xaxis.set_major_formatter(short)
        ax.xaxis.set_minor_formatter(short)
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())


def legend(ax: Axes, **kwargs: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, **{"fontsize": "small", **kwargs})


def shared_legend(fig: Figure, axes: list[Axes]) -> None:
    """One legend for all panels, below them, the figure taller by its rows: a legend per panel
    with every variant (28 entries for 14 variants and two splits) squeezed the axes to nothing."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)  # the first panel's handle for each label
    if not entries:
        return
    rows = -(-len(entries) // LEGEND_COLUMNS)
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + rows * LEGEND_ROW_INCHES)
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=LEGEND_COLUMNS, fontsize="small")


def vline(
    ax: Axes, x: float, text: str, colour: Any, line: tuple[str, float], at: tuple[float, int, int], ink: Any = None
) -> None:
    """A vertical line (``line``: style, width) at ``x`` with ``text`` along it, in ``ink`` (default:
    the line's colour); ``at`` = (height as a fraction of the axes, offset in points across, along):
    from a height above 0.5 the text hangs down, else it stands up; offset left of the line, or right."""
    y, dx, dy = at
    ax.axvline(x, color=colour, linestyle=line[0], linewidth=line[1])
    ax.annotate(
        text,
        (x, y),
        xycoords=("data", "axes fraction"),
        xytext=(dx, dy),
        textcoords="offset points",
        rotation=90,
        va="top" if y > 0.5 else "bottom",
        ha="right" if dx < 0 else "left",
        fontsize="x-small",
        color=colour if ink is None else ink,
    )
