"""Seaborn figures of the report, drawn on matplotlib ``Figure`` objects (Agg canvas, no
pyplot state) and returned as PNG bytes. Every figure colours a variant the same way: the
palette is keyed by the sorted variant names of the whole store. Matplotlib's own cache
and configuration folder follow ``MPLCONFIGDIR`` as usual."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede any pyplot import (seaborn imports it)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator  # noqa: E402

from attnbench.report.document import Figure  # noqa: E402

Palette = dict[str, tuple[float, float, float]]
FAILED_POINT = ("oom", "timeout", "error")
_DPI = 110


def make_palette(variants: Iterable[str]) -> Palette:
    """One colour per variant, fixed by the variant's rank among the sorted names."""
    names = sorted(set(variants))
    colours = sns.color_palette("colorblind" if len(names) <= 10 else "husl", max(1, len(names)))
    return {name: _rgb(colours[i]) for i, name in enumerate(names)}


def _rgb(colour: Iterable[float]) -> tuple[float, float, float]:
    r, g, b = colour
    return float(r), float(g), float(b)


def row_palette(palette: Palette, rows: dict[str, str]) -> Palette:
    """``palette`` plus a colour per report row (label -> variant): the variant's own colour,
    in lighter and darker shades when one variant has rows with different options."""
    out = dict(palette)
    by_variant: dict[str, list[str]] = {}
    for label, variant in rows.items():
        by_variant.setdefault(variant, []).append(label)
    for variant, labels in by_variant.items():
        for i, label in enumerate(sorted(labels)):
            shade = 0.3 + 0.4 * i / (len(labels) - 1) if len(labels) > 1 else None
            out[label] = palette[variant] if shade is None else _rgb(sns.set_hls_values(palette[variant], l=shade))
    return out


def _png(fig: MplFigure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _new(ncols: int, width: float = 6.0, height: float = 4.2) -> tuple[MplFigure, list[Axes]]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9):
        fig = MplFigure(figsize=(width * ncols, height), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _ticks_at(ax: Axes, values: Iterable[float]) -> None:
    """x ticks exactly at the measured values, labelled as plain integers."""
    vals = sorted({float(v) for v in values})
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{v:,.0f}" for v in vals], rotation=45 if len(vals) > 6 else 0)


def _plain_log_y(ax: Axes) -> None:
    """Within one decade a log axis labels its minor ticks: write them as plain numbers."""
    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 10:
        plain = FuncFormatter(lambda v, _pos: f"{v:.3g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)


def _log_x_labels(ax: Axes) -> None:
    """Label only decades on a wide log x axis (minor labels collide); within about a
    decade, label the minor ticks too, in short scientific form."""
    lo, hi = ax.get_xlim()
    if lo > 0 and hi / lo < 30:
        short = FuncFormatter(lambda v, _pos: f"{v:.2g}")
        ax.xaxis.set_major_formatter(short)
        ax.xaxis.set_minor_formatter(short)
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())


def _legend(ax: Axes, **kwargs: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize="small", **kwargs)


LEGEND_COLUMNS = 4  # a shared legend's columns, below the panels
LEGEND_ROW_INCHES = 0.22


def _shared_legend(fig: MplFigure, axes: list[Axes]) -> None:
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


def loss_curves(curves: pd.DataFrame, palette: Palette, labels: dict[str, str], title: str, slug: str) -> Figure | None:
    """Loss against training tokens and against training seconds, one line per seed.

    curves: columns variant, seed, tokens, elapsed_s, split ("train" or "held-out"), loss."""
    curves = curves.dropna(subset=["loss"])
    if curves.empty:
        return None
    fig, axes = _new(2)
    for ax, (x, xlabel) in zip(
        axes, (("tokens", "training tokens"), ("elapsed_s", "training wall-clock time (s)")), strict=True
    ):
        for variant in sorted(curves["variant"].unique()):
            sub = curves[curves["variant"] == variant]
            for split, style in (("train", "-"), ("held-out", "--")):
                part = sub[sub["split"] == split]
                for i, (_, seed_rows) in enumerate(part.groupby("seed", dropna=False)):
                    sns.lineplot(
                        x=seed_rows[x],
                        y=seed_rows["loss"],
                        ax=ax,
                        color=palette[variant],
                        linestyle=style,
                        marker="o" if split == "held-out" else None,
                        markersize=4,
                        estimator=None,
                        sort=True,
                        label=f"{labels.get(variant, variant)} ({split})" if i == 0 else None,
                    )
        ax.set(xlabel=xlabel, ylabel="loss (nats/token)")
        if (legend := ax.get_legend()) is not None:
            legend.remove()  # seaborn adds one per panel: the shared one below replaces them
    _shared_legend(fig, axes)
    fig.suptitle(title)
    return Figure(
        slug,
        title,
        _png(fig),
        "Solid: training loss (includes any weighted auxiliary loss); dashed with markers: "
        "held-out cross-entropy. One line per seed.",
    )


def equal_budget(
    curves: pd.DataFrame, palette: Palette, labels: dict[str, str], title: str, slug: str
) -> Figure | None:
    """Held-out loss against training tokens, FLOPs and seconds: per variant the mean over
    seeds at each evaluation step, with a band from the lowest to the highest seed.

    curves: as for ``loss_curves``, plus step and flops (None where FLOPs are not declared)."""
    held = curves[curves["split"] == "held-out"].dropna(subset=["loss"])
    if held.empty:
        return None
    held = held.assign(flops=pd.to_numeric(held["flops"], errors="coerce"))
    undeclared = sorted(v for v in held["variant"].unique() if held.loc[held["variant"] == v, "flops"].isna().all())
    fig, axes = _new(3)
    for ax, (x, xlabel) in zip(
        axes,
        (("tokens", "training tokens"), ("flops", "training FLOPs"), ("elapsed_s", "training wall-clock time (s)")),
        strict=True,
    ):
        for variant in sorted(held["variant"].unique()):
            sub = held[held["variant"] == variant]
            sub = sub.assign(**{x: pd.to_numeric(sub[x], errors="coerce")})
            sub = sub.dropna(subset=[x])  # a variant that declares no FLOPs has no point on that axis
            if sub.empty:
                continue
            g = (
                sub.groupby("step")
                .agg(x=(x, "mean"), mean=("loss", "mean"), lo=("loss", "min"), hi=("loss", "max"), n=("loss", "size"))
                .sort_values("x")
            )
            ax.plot(
                g["x"],
                g["mean"],
                color=palette[variant],
                marker="o",
                markersize=3,
                label=f"{labels.get(variant, variant)} (n={int(g['n'].max())})",
            )
            ax.fill_between(g["x"], g["lo"], g["hi"], color=palette[variant], alpha=0.2, linewidth=0)
        ax.set(xlabel=xlabel, ylabel="held-out loss (nats/token)")
    _shared_legend(fig, axes)
    fig.suptitle(title)
    missing = (
        f" FLOPs not declared by: {', '.join(labels.get(str(v), str(v)) for v in undeclared)}." if undeclared else ""
    )
    return Figure(
        slug,
        title,
        _png(fig),
        "Validation loss at each evaluation, mean over seeds at each variant's "
        "chosen point; band: lowest to highest seed. Seconds are each step's mean training time." + missing,
    )


def _failed_marks(ax: Axes, failed: pd.DataFrame, palette: Palette) -> None:
    """A dotted vertical line at each failed point's T, labelled with its status."""
    for _, row in failed.iterrows():
        colour = palette[row["variant"]]
        ax.axvline(row["T"], color=colour, linestyle=":", linewidth=1.5)
        ax.annotate(
            f"{row['variant']}: {row['status']} at T={int(row['T'])}",
            (row["T"], 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(-3, -4),
            textcoords="offset points",
            rotation=90,
            va="top",
            ha="right",
            fontsize="x-small",
            color=colour,
        )


def speed_mode(
    points: pd.DataFrame,
    slopes: dict[tuple[str, str], str],
    crossovers: pd.DataFrame,
    palette: Palette,
    mode: str,
    title: str,
    slug: str,
) -> Figure | None:
    """Time and peak memory against T (log-log) for one mode.

    points: columns variant, T, quantity ("time" or "memory"), value, status.
    slopes: (variant, quantity) -> legend text of the fitted slope.
    crossovers: columns variant, T, T_interp (rows of this mode with a crossover)."""
    if points.empty:
        return None
    xlabel = "context length (tokens)" if mode == "decode" else "sequence length T (tokens)"
    ylabels = {
        "time": "time per generated token (s)" if mode == "decode" else "time per call (s)",
        "memory": "peak memory (MiB)",
    }
    scale = {"time": 1.0, "memory": 1.0 / 2**20}
    fig, axes = _new(2)
    for ax, quantity in zip(axes, ("time", "memory"), strict=True):
        sub = points[points["quantity"] == quantity]
        ok = sub[(sub["status"] == "ok") & sub["value"].notna() & (sub["value"] > 0)]
        for variant in sorted(sub["variant"].unique()):
            rows = ok[ok["variant"] == variant].sort_values("T")
            if rows.empty:
                continue
            label = variant + (f" ({slopes[(variant, quantity)]})" if (variant, quantity) in slopes else "")
            sns.lineplot(
                x=rows["T"],
                y=rows["value"] * scale[quantity],
                ax=ax,
                color=palette[variant],
                marker="o",
                label=label,
                estimator=None,
            )
        _failed_marks(ax, sub[sub["status"].isin(FAILED_POINT)].drop_duplicates(["variant", "T"]), palette)
        if quantity == "time":
            for _, cx in crossovers.iterrows():
                at = cx["T_interp"] if pd.notna(cx["T_interp"]) else cx["T"]
                ax.axvline(at, color=palette[cx["variant"]], linestyle="--", linewidth=1)
                ax.annotate(
                    f"crossover {cx['variant']} vs softmax ≈ {at:,.0f}",
                    (at, 0.02),
                    xycoords=("data", "axes fraction"),
                    xytext=(3, 0),
                    textcoords="offset points",
                    rotation=90,
                    va="bottom",
                    ha="left",
                    fontsize="x-small",
                    color=palette[cx["variant"]],
                )
        if not ok.empty:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            shown = sub.loc[sub["status"] != "skipped", "T"]  # ok and failed points, not skipped ones
            _ticks_at(ax, shown)
            ax.set_xlim(shown.min() / 1.25, shown.max() * 1.25)
            _plain_log_y(ax)
        ax.set(xlabel=xlabel, ylabel=ylabels[quantity])
        _legend(ax, title="variant (log-log slope ± 95% CI)")
    fig.suptitle(title)
    return Figure(
        slug,
        title,
        _png(fig),
        "Log-log axes; legend: fitted slope of log y against log T. Dotted lines: points that "
        "ran out of memory, timed out or failed (longer lengths were not attempted). "
        "Dashed: crossover length against softmax.",
    )


def scaling(points: pd.DataFrame, fits: pd.DataFrame, palette: Palette, title: str, slug: str) -> Figure | None:
    """Held-out loss against parameters (and training FLOPs) with the fitted power law.

    points: columns variant, x ("params" or "flops"), size, loss.
    fits: columns variant, x, a, b, c (rows with a fit)."""
    if points.empty:
        return None
    xs = [x for x in ("params", "flops") if x in set(points["x"])]
    fig, axes = _new(len(xs))
    xlabels = {"params": "parameters N", "flops": "training compute C (FLOPs)"}
    symbols = {"params": "N", "flops": "C"}
    for ax, x in zip(axes, xs, strict=True):
        pts = points[points["x"] == x]
        for variant in sorted(pts["variant"].unique()):
            rows = pts[pts["variant"] == variant]
            colour = palette[variant]
            sns.scatterplot(x=rows["size"], y=rows["loss"], ax=ax, color=colour, s=40, label=variant)
            fit = fits[(fits["variant"] == variant) & (fits["x"] == x)]
            if not fit.empty:
                a, b, c = (float(fit.iloc[0][k]) for k in ("a", "b", "c"))
                grid = np.geomspace(rows["size"].min() / 1.3, rows["size"].max() * 1.3, 100)
                sns.lineplot(
                    x=grid,
                    y=a * grid**-b + c,
                    ax=ax,
                    color=colour,
                    label=f"{variant}: {a:.3g}·{symbols[x]}^-{b:.3g} + {c:.3g}",
                )
        ax.set_xscale("log")
        _log_x_labels(ax)
        ax.set(xlabel=xlabels[x], ylabel="held-out loss (nats/token)")
        _legend(ax)
    fig.suptitle(title)
    return Figure(slug, title, _png(fig), "Points: mean over seeds per model size; lines: L = a·x^-b + c.")


def recall(acc: pd.DataFrame, coord: str, palette: Palette, title: str, slug: str) -> Figure | None:
    """Accuracy against a difficulty coordinate (e.g. number of key-value pairs).

    acc: columns variant, <coord>, accuracy (one row per seed)."""
    acc = acc.dropna(subset=["accuracy"])
    if acc.empty:
        return None
    fig, axes = _new(1, width=6.5)
    ax = axes[0]
    for variant in sorted(acc["variant"].unique()):
        rows = acc[acc["variant"] == variant]
        sns.lineplot(
            x=rows[coord], y=rows["accuracy"], ax=ax, color=palette[variant], marker="o", label=variant, errorbar=None
        )
    values = sorted(acc[coord].unique())
    if len(values) > 2 and all(v > 0 for v in values) and values[-1] / values[0] >= 8:
        ax.set_xscale("log", base=2)
    if all(isinstance(v, (int, float, np.number)) for v in values):
        _ticks_at(ax, values)
    ax.set(xlabel=coord.replace("_", " "), ylabel="accuracy on answer tokens (fraction)", ylim=(-0.02, 1.02))
    _legend(ax)
    fig.suptitle(title)
    return Figure(slug, title, _png(fig), "Mean over seeds of the held-out accuracy at each difficulty.")
