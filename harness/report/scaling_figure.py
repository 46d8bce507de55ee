"""The scaling picture: held-out loss against non-embedding parameters, log-log, one panel
per variant with the baseline drawn in every panel for reference. Each variant: its mean
loss per size with the range over seeds, its supported law and the law's pointwise 95%
bootstrap band."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from attnbench.plotting import Axes, legend, panels, plain_log_y
from attnbench.report import figures
from attnbench.report.document import Figure
from attnbench.report.figures import finish
from attnbench.stats.power_laws import LAW_TEXT, ScalingFit, law_values
from attnbench.stats.scaling_comparison import band

COLUMNS = 3


@dataclass(frozen=True)
class Curve:
    """One variant's points (size, mean, lowest and highest seed) and its fit (or None)."""

    variant: str
    sizes: list[float]
    means: list[float]
    lows: list[float]
    highs: list[float]
    fit: ScalingFit | None
    non_embedding: bool = True  # sizes are non-embedding parameters (else total: an older store)


def short_count(v: float) -> str:
    """12000 -> '12k', 3e6 -> '3M'."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def _draw(ax: Axes, curve: Curve, colour: tuple[float, float, float], reference: bool) -> None:
    x = np.asarray(curve.sizes)
    y = np.asarray(curve.means)
    err = np.vstack([y - np.asarray(curve.lows), np.asarray(curve.highs) - y])
    style = {"alpha": 0.55, "linestyle": "--"} if reference else {}
    ax.errorbar(x, y, yerr=err, fmt="o", color=colour, ms=4, capsize=2, alpha=0.55 if reference else 1.0)
    if curve.fit is None:
        ax.plot([], [], color=colour, label=f"{curve.variant}: too few sizes to fit", **style)
        return
    grid = np.geomspace(x.min() / 1.2, x.max() * 1.2, 80)
    a, b, c, _ = curve.fit.params()
    label = f"{curve.variant}: {LAW_TEXT[curve.fit.law]}, b = {b:.3g}" + (f", c = {c:.3g}" if c else "")
    ax.plot(grid, law_values(curve.fit.params(), grid), color=colour, label=label, **style)
    if not reference:
        lo, hi = band(curve.fit, grid)
        ax.fill_between(grid, lo, hi, color=colour, alpha=0.2, linewidth=0)


def scaling_figure(
    curves: list[Curve], baseline: str, palette: figures.Palette, title: str, slug: str
) -> Figure | None:
    """One panel per variant (the baseline alone when it is the only one), log-log."""
    if not curves:
        return None
    base = next((c for c in curves if c.variant == baseline), None)
    others = [c for c in curves if c.variant != baseline] or curves
    xlabel = (
        "non-embedding parameters N"
        if all(c.non_embedding for c in curves)
        else "parameters N (total where a run recorded no non-embedding count)"
    )
    fig, axes = panels(len(others), COLUMNS, (5.2, 4.0), sharex=True, sharey=True)
    for ax, curve in zip(axes, others, strict=True):
        if base is not None and curve is not base:
            _draw(ax, base, (0.45, 0.45, 0.45), reference=True)
        _draw(ax, curve, palette[curve.variant], reference=False)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(curve.variant if base is None or curve is base else f"{curve.variant} against {baseline}")
        ax.set(xlabel=xlabel, ylabel="held-out loss (nats/token)")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: short_count(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        plain_log_y(ax)
        legend(ax, loc="upper right")
    return finish(
        fig,
        slug,
        title,
        "Points: mean held-out loss over seeds per model size; bars: lowest to highest seed. Line: the law "
        "the data support; band: its pointwise 95% bootstrap band (seeds resampled within each size). "
        f"Dashed grey: {baseline}, for reference.",
    )
