"""Seaborn figures of the training and speed sections (``attnbench.plotting`` sets the backend
and draws). Every figure colours a variant the same way: the palette is keyed by the sorted
variant names of the whole store."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import seaborn as sns

from attnbench.plotting import Axes, legend, panels, plain_log_y, png, shared_legend, ticks_at, vline
from attnbench.plotting import Figure as MplFigure
from attnbench.report.document import Figure

Palette = dict[str, tuple[float, float, float]]
FAILED_POINT = ("oom", "timeout", "error")


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


def finish(fig: MplFigure, slug: str, title: str, caption: str) -> Figure:
    """``fig`` titled and drawn to PNG, as the report's figure ``slug``."""
    fig.suptitle(title)
    return Figure(slug, title, png(fig), caption)


def loss_curves(curves: pd.DataFrame, palette: Palette, labels: dict[str, str], title: str, slug: str) -> Figure | None:
    """Loss against training tokens and against training seconds, one line per seed.

    curves: columns variant, seed, tokens, elapsed_s, split ("train" or "held-out"), loss."""
    curves = curves.dropna(subset=["loss"])
    if curves.empty:
        return None
    fig, axes = panels(2, 2, (6.0, 4.2))
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
    shared_legend(fig, axes)
    return finish(
        fig,
        slug,
        title,
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
    fig, axes = panels(3, 3, (6.0, 4.2))
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
    shared_legend(fig, axes)
    missing = (
        f" FLOPs not declared by: {', '.join(labels.get(str(v), str(v)) for v in undeclared)}." if undeclared else ""
    )
    return finish(
        fig,
        slug,
        title,
        "Validation loss at each evaluation, mean over seeds at each variant's "
        "chosen point; band: lowest to highest seed. Seconds are each step's mean training time." + missing,
    )


def _failed_marks(ax: Axes, failed: pd.DataFrame, palette: Palette) -> None:
    """A dotted vertical line at each failed point's T, labelled with its status."""
    for _, row in failed.iterrows():
        text = f"{row['variant']}: {row['status']} at T={int(row['T'])}"
        vline(ax, row["T"], text, palette[row["variant"]], (":", 1.5), (1.0, -3, -4))


def _crossover_marks(ax: Axes, crossovers: pd.DataFrame, palette: Palette) -> None:
    """A dashed vertical line at each crossover length (interpolated where stored)."""
    for _, cx in crossovers.iterrows():
        at = cx["T_interp"] if pd.notna(cx["T_interp"]) else cx["T"]
        text = f"crossover {cx['variant']} vs softmax ≈ {at:,.0f}"
        vline(ax, at, text, palette[cx["variant"]], ("--", 1), (0.02, 3, 0))


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
    decode = mode == "decode"
    xlabel = "context length (tokens)" if decode else "sequence length T (tokens)"
    ylabels = {"time": f"time per {'generated token' if decode else 'call'} (s)", "memory": "peak memory (MiB)"}
    fig, axes = panels(2, 2, (6.0, 4.2))
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
                y=rows["value"] * (1.0 if quantity == "time" else 1.0 / 2**20),
                ax=ax,
                color=palette[variant],
                marker="o",
                label=label,
                estimator=None,
            )
        _failed_marks(ax, sub[sub["status"].isin(FAILED_POINT)].drop_duplicates(["variant", "T"]), palette)
        if quantity == "time":
            _crossover_marks(ax, crossovers, palette)
        if not ok.empty:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            shown = sub.loc[sub["status"] != "skipped", "T"]  # ok and failed points, not skipped ones
            ticks_at(ax, shown)
            ax.set_xlim(shown.min() / 1.25, shown.max() * 1.25)
            plain_log_y(ax)
        ax.set(xlabel=xlabel, ylabel=ylabels[quantity])
        legend(ax, title="variant (log-log slope ± 95% CI)")
    return finish(
        fig,
        slug,
        title,
        "Log-log axes; legend: fitted slope of log y against log T. Dotted lines: points that "
        "ran out of memory, timed out or failed (longer lengths were not attempted). "
        "Dashed: crossover length against softmax.",
    )


def recall(acc: pd.DataFrame, coord: str, palette: Palette, title: str, slug: str) -> Figure | None:
    """Accuracy against a difficulty coordinate (e.g. number of key-value pairs).

    acc: columns variant, <coord>, accuracy (one row per seed)."""
    acc = acc.dropna(subset=["accuracy"])
    if acc.empty:
        return None
    fig, axes = panels(1, 1, (6.5, 4.2))
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
        ticks_at(ax, values)
    ax.set(xlabel=coord.replace("_", " "), ylabel="accuracy on answer tokens (fraction)", ylim=(-0.02, 1.02))
    legend(ax)
    return finish(fig, slug, title, "Mean over seeds of the held-out accuracy at each difficulty.")
