"""Long-context sections: train experiments run with ``eval_lengths``.

Per experiment: which lengths each variant ran (or why not), the held-out loss against
position on text (the longest length each variant ran), and on tasks the exact-match
accuracy (every answer token right) against length, depths pooled, with Wilson intervals,
plus a table by length and depth.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnbench import plotting
from attnbench.report import figures
from attnbench.report.document import Figure, Section, Table
from attnbench.report.figures import finish
from attnbench.report.load import StoreData
from attnbench.report.selection import select

LENGTH_METRICS = ("length_status", "length_loss", "position_loss", "length_accuracy", "length_exact")
_Z95 = 1.959964  # two-sided 95% normal quantile


def wilson(k: float, n: float, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials (Wilson 1927); (nan, nan) for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rows(data: StoreData, exp: str) -> pd.DataFrame:
    """Length rows of the chosen runs of ``exp``: label, seed, name, value and tags flattened."""
    runs = data.runs_of("train")
    out: list[dict[str, Any]] = []
    sels = select(runs[runs["experiment"] == exp])
    positions = [_positions(s.runs) for s in sels]
    mixed = len(set(positions)) > 1  # models that differ in positions alone: say which row is which
    for s, pos in zip(sels, positions, strict=True):
        label = f"{s.label} ({pos} positions)" if mixed else s.label
        done = s.runs[s.runs["status"] == "done"]
        seeds = dict(zip(done["id"], done["seed"], strict=True))
        for _, r in data.results_of(done["id"], LENGTH_METRICS).iterrows():
            out.append(
                {"variant": label, "seed": seeds[r["run_id"]], "name": r["name"], "value": r["value"], **r["tags"]}
            )
    return pd.DataFrame(out)


def _positions(runs: pd.DataFrame) -> str:
    return "/".join(sorted({c.get("model", {}).get("positions", "learned") for c in runs["config"]}))


def _status_table(exp: str, rows: pd.DataFrame) -> Table:
    st = rows[rows["name"] == "length_status"]
    data = (
        st.groupby(["variant", "eval_length"], sort=True)
        .agg(
            status=("status", lambda s: "/".join(sorted(set(s)))),
            reason=("reason", lambda r: "; ".join(sorted(set(r) - {""}))),
        )
        .reset_index()
    )
    view = data[["variant", "eval_length"]].copy()
    view["ran"] = [s if not r else f"{s}: {r}" for s, r in zip(data["status"], data["reason"], strict=True)]
    wide = view.pivot(index="variant", columns="eval_length", values="ran").reset_index()
    wide.columns = [str(c) if c == "variant" else f"T={c}" for c in wide.columns]
    return Table(f"{exp}-lengths", f"{exp}: which lengths each variant ran", data, wide)


def _exact(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Exact-match accuracy pooled over seeds (and whatever ``keys`` leave out) with Wilson CIs."""
    ex = rows[rows["name"] == "length_exact"].copy()
    ex["hits"] = ex["value"] * ex["n"]
    g = ex.groupby(keys, sort=True).agg(hits=("hits", "sum"), n=("n", "sum")).reset_index()
    g["exact"] = g["hits"] / g["n"]
    bounds = [wilson(h, n) for h, n in zip(g["hits"], g["n"], strict=True)]
    g["ci95_lo"], g["ci95_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    return g


def _needle_table(exp: str, rows: pd.DataFrame) -> Table:
    keys = ["variant", "task", "eval_length", "depth"]
    g = _exact(rows, keys)
    acc = rows[rows["name"] == "length_accuracy"].assign(hits=lambda d: d["value"] * d["n"])
    per_byte = acc.groupby(keys, sort=True).agg(byte_hits=("hits", "sum"), bytes=("n", "sum")).reset_index()
    g = g.merge(per_byte, on=keys, how="left")
    g["answer_bytes_right"] = g["byte_hits"] / g["bytes"]
    view = g[keys].copy()
    view["exact match [95% Wilson]"] = [
        f"{e:.3f} [{lo:.3f}, {hi:.3f}] (n={int(n)})"
        for e, lo, hi, n in zip(g["exact"], g["ci95_lo"], g["ci95_hi"], g["n"], strict=True)
    ]
    view["answer bytes right"] = [f"{a:.3f}" for a in g["answer_bytes_right"]]
    return Table(f"{exp}-needle", f"{exp}: retrieval by length and needle depth", g, view)


def _accuracy_figure(exp: str, rows: pd.DataFrame, palette: figures.Palette, trained: int | None) -> Figure | None:
    g = _exact(rows, ["variant", "eval_length"])
    if g.empty:
        return None
    fig, axes = plotting.panels(1, 1, (6.5, 4.2))
    ax = axes[0]
    for variant, v in g.groupby("variant", sort=True):
        err = [v["exact"] - v["ci95_lo"], v["ci95_hi"] - v["exact"]]
        ax.errorbar(
            v["eval_length"],
            v["exact"],
            yerr=err,
            marker="o",
            capsize=3,
            color=palette.get(str(variant)),
            label=variant,
        )
    if trained:
        ax.axvline(trained, color="grey", linestyle=":", label=f"trained length {trained}")
    ax.set_xscale("log", base=2)
    plotting.ticks_at(ax, sorted(g["eval_length"].unique()))
    ax.set(xlabel="evaluation length (tokens)", ylabel="exact match (all answer tokens right)", ylim=(-0.02, 1.02))
    plotting.legend(ax)
    title = f"{exp}: retrieval against length"
    caption = (
        "Depths and seeds pooled; bars: 95% Wilson intervals. Lengths a variant cannot run are absent (see the table)."
    )
    return finish(fig, f"{exp}-needle-length", title, caption)


def _position_figure(exp: str, rows: pd.DataFrame, palette: figures.Palette, trained: int | None) -> Figure | None:
    pos = rows[rows["name"] == "position_loss"]
    if pos.empty:
        return None
    fig, axes = plotting.panels(1, 1, (6.5, 4.2))
    ax = axes[0]
    for variant, v in pos.groupby("variant", sort=True):
        v = v[v["eval_length"] == v["eval_length"].max()]  # the longest length covers every position
        curve = v.groupby(["pos_start", "pos_end"], sort=True)["value"].mean().reset_index()
        mid = (curve["pos_start"] + curve["pos_end"]) / 2
        ax.plot(mid, curve["value"], marker=".", color=palette.get(str(variant)), label=variant)
    if trained:
        ax.axvline(trained, color="grey", linestyle=":", label=f"trained length {trained}")
    ax.set(xlabel="position in the window (tokens)", ylabel="held-out loss (nats/token)")
    plotting.legend(ax)
    title = f"{exp}: loss against position"
    caption = "Mean over windows and seeds per bucket, at the longest length each variant ran."
    return finish(fig, f"{exp}-position-loss", title, caption)


def _trained_length(data: StoreData, exp: str) -> int | None:
    runs = data.runs_of("train")
    lengths = {c.get("train", {}).get("seq_len") for c in runs[runs["experiment"] == exp]["config"]}
    return lengths.pop() if len(lengths) == 1 else None


def longcontext_sections(data: StoreData, palette: figures.Palette) -> list[Section]:
    """One section per train experiment that stored length rows; none otherwise."""
    results = data.results
    if results.empty or not results["name"].isin(LENGTH_METRICS).any():
        return []
    sections = []
    for exp in dict.fromkeys(data.runs_of("train")["experiment"]):
        rows = _rows(data, exp)
        if rows.empty:
            continue
        rows_palette = {
            **palette,
            **{str(v): palette.get(str(v).split(" ")[0], (0.5, 0.5, 0.5)) for v in rows["variant"]},
        }
        trained = _trained_length(data, exp)
        tables, figs = [_status_table(exp, rows)], []
        if (rows["name"] == "length_exact").any():
            tables.append(_needle_table(exp, rows))
            figs.append(_accuracy_figure(exp, rows, rows_palette, trained))
        figs.append(_position_figure(exp, rows, rows_palette, trained))
        intro = (
            f"Trained at {trained or 'one'} tokens, evaluated after training at each of eval_lengths. A length a "
            "variant cannot run is listed with the reason (learned absolute positions end at the trained context; "
            "a mixer may declare its own limit); it is not run and not left out silently."
        )
        sections.append(Section(f"Long context: {exp}", intro, tables, [f for f in figs if f is not None]))
    return sections
