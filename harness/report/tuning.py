"""The tuning trail of successive halving: per variant, each rung's points, budget and
validation criterion, and which point went on; where each search window stopped; and one
panel per experiment of the criterion against the learning rate (log x, a line per rung,
the chosen rate starred, a search window's bounds drawn; the choice reads validation data only)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pandas as pd

from attnbench.plan.grid_window import GridWindow, edge_sides, line_values, read_windows, stopped_at
from attnbench.plan.tuning_choice import near_tie_text, rank, score_point
from attnbench.plotting import Axes, legend, log_x_labels, panels, vline
from attnbench.report.document import Figure, Section, Table
from attnbench.report.figures import Palette, finish, make_palette
from attnbench.report.load import StoreData
from attnbench.report.values import grid_point, is_number, num, point_text

LR = "lr"
_COLUMNS = 3  # panels per row
_PANEL = (4.2, 3.3)  # inches per panel
VALUES = {"loss": ("val_loss", "validation loss"), "accuracy": ("val_accuracy", "validation accuracy")}


def _budget(config: dict) -> str:
    budget = (config.get("train") or {}).get("budget") or {}
    return ", ".join(f"{v:g} {k}" for k, v in budget.items() if v is not None)


def _protocol(runs: pd.DataFrame) -> dict[str, Any]:
    """The protocol recorded with the runs (every cell of an experiment records the same)."""
    return next((s["protocol"] for s in runs["summary"] if isinstance(s.get("protocol"), dict)), {})


def criterion_of(protocol: dict[str, Any]) -> str:
    """What the tuning ranked on: ``protocol.tuning.criterion``, validation loss by default."""
    return str((protocol.get("tuning") or {}).get("criterion") or "loss")


def _mean(values: list[Any]) -> float | None:
    """The mean over seeds; None where a seed has no finite value (it diverged or failed)."""
    return statistics.fmean(values) if values and all(is_number(v) for v in values) else None


def _by_point(at: pd.DataFrame) -> dict[str, tuple[dict[str, Any], pd.DataFrame]]:
    out: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for pos, coords in enumerate(at["coords"]):
        point = grid_point(coords)
        out.setdefault(point_text(point), (point, []))[1].append(pos)
    return {k: (p, at.iloc[rows]) for k, (p, rows) in out.items()}


def search_text(window: GridWindow, axis: str, point: dict[str, Any], tried: list[dict[str, Any]]) -> str:
    """Where the search of ``axis`` ended, with ``point`` chosen."""
    values = line_values(point, axis, tried)
    span = f"{num(values[0], 3)} to {num(values[-1], 3)}, {len(values)} points"
    side = stopped_at(window, axis, point, tried)
    if side is not None:
        return f"{axis} stopped at the declared {side} bound {window.bound(side):g} ({span})"
    if edge_sides(point, axis, tried):
        return f"{axis} on the {edge_sides(point, axis, tried)[0]} edge of the searched points, unfinished ({span})"
    return f"{axis} inside the searched window ({span})"


def _ranked(points: dict[str, tuple[dict[str, Any], pd.DataFrame]], criterion: str) -> tuple[dict, list[str], Any]:
    """Each point's score, the points best first, and the near-tie that decided the first (or None)."""
    scored = {
        text: score_point(tuple(sorted(p.items())), list(zip(sub["status"], sub["summary"], strict=True)), criterion)
        for text, (p, sub) in points.items()
    }
    text_of = {ps.point: text for text, ps in scored.items()}
    return scored, [text_of[ps.point] for ps in rank(list(scored.values()))], near_tie_text(list(scored.values()))


def _group_rows(exp: str, variant: str, runs: pd.DataFrame, protocol: dict[str, Any]) -> tuple[list, list, list]:
    """One (experiment, variant): its trail rows, its search rows and its figure points."""
    criterion = criterion_of(protocol)
    key = VALUES[criterion][0]
    windows = read_windows(protocol.get("windows"))
    tune = runs[[c.get("stage") == "tune" for c in runs["coords"]]]
    finals = [grid_point(c) for c in runs["coords"] if c.get("stage") == "final"]
    chosen = finals[0] if finals else None
    final = {point_text(p) for p in finals}
    tried = [grid_point(c) for c in tune["coords"]]
    trail, curve = [], []
    for rung in sorted({int(c["rung"]) for c in tune["coords"]}):
        at = tune[[int(c["rung"]) == rung for c in tune["coords"]]]
        later = {point_text(grid_point(c)) for c in tune["coords"] if int(c["rung"]) > rung} or final
        points = _by_point(at)
        scored, order, tie = _ranked(points, criterion)
        for text in order:
            point, sub = points[text]
            loss = _mean([m.get("val_loss") for m in sub["summary"]])
            value = _mean([m.get(key) for m in sub["summary"]])
            failed = sorted(set(sub["status"]) - {"done"})
            trail.append(
                {
                    "experiment": exp,
                    "variant": variant,
                    "rung": rung,
                    "budget": _budget(at.iloc[0]["config"]),
                    "point": text,
                    "seeds": len(sub),
                    "val_loss": loss if loss is not None else math.inf,
                    **({"val_accuracy": value} if criterion == "accuracy" else {}),
                    "seed_spread": scored[text].spread if len(sub) > 1 else None,  # max - min of the seeds' scores
                    **({"beyond_null": scored[text].learned} if criterion == "accuracy" else {}),
                    "near_tie": tie if text == order[0] else None,
                    "status": ", ".join(failed) if failed else "done",
                    "added_by_search": any(a in point and float(point[a]) not in w.start for a, w in windows.items()),
                    "went_on": text in later,
                }
            )
            if is_number(point.get(LR)) and (chosen is None or _same_line(point, chosen)):
                at_lr = {"experiment": exp, "variant": variant, "rung": rung, "lr": float(point[LR]), "value": value}
                curve.append({**at_lr, "status": trail[-1]["status"], "chosen": point == chosen})
    search = [
        {
            "experiment": exp,
            "variant": variant,
            "axis": axis,
            "chosen": chosen[axis],
            "side": stopped_at(window, axis, chosen, tried) or "",
            "result": search_text(window, axis, chosen, tried),
        }
        for axis, window in windows.items()
        if chosen is not None and axis in chosen
    ]
    return trail, search, curve


def _same_line(point: dict[str, Any], chosen: dict[str, Any]) -> bool:
    """``point`` has ``chosen``'s coordinates other than the learning rate."""
    return {k: v for k, v in point.items() if k != LR} == {k: v for k, v in chosen.items() if k != LR}


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
    for bound, side in zip(bounds or (), ("lower", "upper"), strict=False):
        at = (0.9, 3 if side == "lower" else -3, 0)
        vline(ax, bound, f"{side} bound {bound:g}", "0.4", (":", 1.2), at, ink="0.3")
    ax.set_xscale("log")
    lrs = [*points["lr"], *(bounds or ())]
    ax.set_xlim(min(lrs) / 1.6, max(lrs) * 1.6)
    log_x_labels(ax)
    ax.set(xlabel="learning rate (log scale)", ylabel=ylabel)
    legend(ax, fontsize="x-small", loc="best")


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
    fig, axes = panels(len(experiments), _COLUMNS, _PANEL, font_scale=0.8)
    for ax, exp in zip(axes, experiments, strict=True):
        _panel(ax, points[points["experiment"] == exp], palette, bounds.get(exp), ylabels.get(exp, "validation loss"))
        ax.set_title(exp, fontsize="medium")
    return finish(
        fig,
        slug,
        title,
        "Mean over the tuning seeds at each learning rate tried; solid: the first rung (every point at one "
        "budget), dashed: later rungs at larger budgets. Star: the chosen rate. x on the top edge: a point that "
        "diverged or gave no finite value (stored, ranked last). Dotted: a search window's declared bounds.",
    )


def _figure(data: StoreData, curve: list[dict[str, Any]], protocols: dict[str, dict[str, Any]]) -> Figure | None:
    if not curve:
        return None
    bounds = {}
    for exp, protocol in protocols.items():
        window = read_windows(protocol.get("windows")).get(LR)
        if window is not None:
            bounds[exp] = (window.bounds[0], window.bounds[1])
    ylabels = {exp: VALUES[criterion_of(p)][1] for exp, p in protocols.items()}
    points = pd.DataFrame(curve).assign(value=lambda d: pd.to_numeric(d["value"], errors="coerce"))
    title = "Tuning: the validation criterion against the learning rate"
    return tuning_curves(points, bounds, ylabels, make_palette(data.all_variants), title, "tuning_lr")


def tuning_section(data: StoreData) -> list[Section]:
    train = data.runs_of("train")
    rows, searched, curve, protocols, notes = [], [], [], {}, []
    for (exp, variant), runs in train.groupby(["experiment", "variant"], sort=False):
        if not any(c.get("stage") == "tune" for c in runs["coords"]):
            continue
        if not any(c.get("stage") == "final" for c in runs["coords"]) and not (runs["status"] == "done").any():
            notes.append(
                f"{exp}, {variant}: every tuning point failed or diverged, so nothing was chosen and no final "
                "runs were trained (the trail below gives each point's status)."
            )
        protocols[str(exp)] = protocol = _protocol(runs)
        trail, search, points = _group_rows(str(exp), str(variant), runs, protocol)
        rows, searched, curve = rows + trail, searched + search, curve + points
    if not rows:
        return []
    raw = pd.DataFrame(rows)
    view = raw.assign(
        **{k: [num(v) for v in raw[k]] for k in ("val_loss", "val_accuracy", "seed_spread") if k in raw},
        near_tie=[t if isinstance(t, str) else "" for t in raw["near_tie"]],
        went_on=["yes" if w else "" for w in raw["went_on"]],
        added_by_search=["yes" if a else "" for a in raw["added_by_search"]],
    )
    tables = [Table("tuning", "Tuning trail per variant", raw, view)]
    if searched:
        found = pd.DataFrame(searched)
        view = found.drop(columns=["side"]).assign(chosen=[num(v, 3) for v in found["chosen"]])
        note = (
            "A search window's rung adds the next point beyond its best point while that point lies on an edge of "
            "the values tried; it stops where the best point is inside (a worse or diverged neighbour was tried) "
            "or where the next point would pass a declared bound."
        )
        tables.append(Table("tuning_windows", "Where each search window stopped", found, view, note))
    figure = _figure(data, curve, protocols)
    return [
        Section(
            "Tuning: successive halving",
            intro=(
                "Each rung trains every remaining grid point on the tuning seeds at its budget (a search window adds "
                "points beyond an edge that is best, in the same rung); the best points by the tuning criterion "
                "(mean validation loss; with the accuracy criterion, mean validation accuracy among the points "
                "whose every seed is beyond its null, the others by loss) go on at a larger budget, and the "
                "survivor runs at the full budget on every seed (the runs the summary reports). seed_spread is "
                "the max - min of a point's seed scores; a point within that spread of the best mean is a "
                "near-tie, and a near-tie goes to the lower rate (near_tie says where that decided the choice)."
            ),
            tables=tables,
            figures=[figure] if figure is not None else [],
            notes=notes,
        )
    ]
