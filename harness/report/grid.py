"""Where each variant's chosen grid point sits: on an edge of a numeric grid axis (its best
may lie beyond the grid: widen it), and its learning-rate window, the grid's learning rates
whose validation loss lies within the protocol's margin of the best (a narrow window is itself
a finding: recall in recurrent models is known to succeed only in a narrow one).

An axis the tuning searched (a search window, plan/grid_window.py) has an edge only where the
search stopped at a declared bound: the note then names that bound."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnbench.plan.grid_window import read_windows, stopped_at
from attnbench.report.document import Problem, Section, Table
from attnbench.report.load import StoreData
from attnbench.report.paired import metric_of, protocol_of
from attnbench.report.selection import Selection, fixed_options, reported_runs, select
from attnbench.report.values import MISSING, OPTION_PREFIX, grid_point, is_number, key_of, num, point_text

LR = "lr"
EDGE_NOTE = "chosen at a grid edge"
BOUND_NOTE = "chosen at a declared bound"


def axis_name(key: str) -> str:
    """A grid coordinate as a reader knows it: a swept variant option by its option's name."""
    return key.split(".", 2)[2] if key.startswith(OPTION_PREFIX) and key.count(".") >= 2 else key


@dataclass(frozen=True)
class Edge:
    """The chosen point's value is the smallest ("lower") or largest ("upper") of a numeric axis;
    on a searched axis, the search stopped there at the declared ``bound``."""

    axis: str
    side: str
    values: tuple[float, ...]  # the axis' grid values, ascending
    bound: float | None = None  # a search window's declared bound the search stopped at
    beyond: float | None = None  # the point the search would have tried next, past that bound

    def text(self) -> str:
        if self.bound is not None:
            return f"{axis_name(self.axis)} stopped at the declared {self.side} bound {num(self.bound, 3)}"
        return f"{axis_name(self.axis)} at the grid's {self.side} edge"


def numeric_axes(points: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> dict[str, tuple[float, ...]]:
    """Grid coordinates that take two or more numeric values: axis -> its values, ascending."""
    values: dict[str, set[float]] = {}
    for p in points:
        for k, v in p.items():
            if is_number(v):
                values.setdefault(k, set()).add(float(v))
    return {k: tuple(sorted(vs)) for k, vs in values.items() if len(vs) >= 2}


def edges_of(sel: Selection) -> list[Edge]:
    """The axes on whose edge ``sel``'s chosen point lies (a 2-value axis always has it on one);
    a searched axis only where its search stopped at a declared bound."""
    windows = read_windows(protocol_of(sel).get("windows"))
    out = []
    for axis, values in numeric_axes(sel.grid).items():
        v: Any = sel.point.get(axis)
        if not is_number(v):
            continue
        window = windows.get(axis)
        side = stopped_at(window, axis, sel.point, sel.grid) if window is not None else None
        if side is not None and window is not None:
            step = window.step() if side == "upper" else 1 / window.step()
            out.append(Edge(axis, side, values, window.bound(side), float(v) * step))
        elif window is not None and float(v) not in (values[0], values[-1]):
            continue  # inside its search
        elif float(v) == values[0]:
            out.append(Edge(axis, "lower", values))
        elif float(v) == values[-1]:
            out.append(Edge(axis, "upper", values))
    return out


def edge_clause(edges: list[Edge]) -> str:
    """ "lr at the grid's upper edge: widen it", "lr stopped at the declared upper bound 0.03: the
    best may lie beyond it" ('' for none)."""
    grid = [e.text() for e in edges if e.bound is None]
    bounds = [e.text() for e in edges if e.bound is not None]
    parts = [", ".join(grid) + (": widen it" if len(grid) == 1 else ": widen them")] if grid else []
    if bounds:
        parts.append(
            ", ".join(bounds)
            + (": the best may lie beyond it" if len(bounds) == 1 else ": the best may lie beyond them")
        )
    return "; ".join(parts)


@dataclass(frozen=True)
class Window:
    """The learning rates within ``margin`` of the best validation loss, at the chosen point's
    other coordinates, on runs of equal budget (``basis``)."""

    within: tuple[float, ...]
    of: tuple[float, ...]
    margin: float
    basis: str

    def text(self) -> str:
        lo, hi = num(self.within[0], 3), num(self.within[-1], 3)
        span = f"{lo} to {hi}" if len(self.within) > 1 else f"{lo} alone"
        return f"{span} ({len(self.within)} of {len(self.of)} learning rates within ±{self.margin:g})"


def _runs_of(data: StoreData, sel: Selection) -> pd.DataFrame:
    """Every run of ``sel``'s (experiment, variant, model, fixed options), tuning rungs included."""
    train = data.runs_of("train")
    mine = [
        exp == sel.experiment
        and variant == sel.variant
        and int(coords.get("model", 0)) == sel.model
        and key_of(fixed_options(str(variant), coords, config)) == key_of(sel.options)
        for exp, variant, coords, config in zip(
            train["experiment"], train["variant"], train["coords"], train["config"], strict=True
        )
    ]
    return train[pd.Series(mine, index=train.index, dtype=bool)]


def _val_by_point(runs: pd.DataFrame) -> tuple[dict[str, tuple[dict[str, Any], float]], str]:
    """Mean validation loss per grid point over finished runs of one budget: the first tuning rung
    where successive halving ran (every point at the same budget), else the reported runs."""
    first_rung = [c.get("stage") == "tune" and int(c.get("rung", 0)) == 0 for c in runs["coords"]]
    tune = runs[pd.Series(first_rung, index=runs.index, dtype=bool)]
    source, basis = (tune, "tuning rung 0") if not tune.empty else (reported_runs(runs), "the grid's runs")
    losses: dict[str, tuple[dict[str, Any], list[float]]] = {}
    for coords, status, summary in zip(source["coords"], source["status"], source["summary"], strict=True):
        v = summary.get("val_loss")
        if status == "done" and is_number(v):
            point = grid_point(coords)
            losses.setdefault(key_of(point), (point, []))[1].append(float(v))
    return {k: (p, statistics.fmean(vs)) for k, (p, vs) in losses.items()}, basis


def lr_window(data: StoreData, sel: Selection) -> Window | None:
    """None where the grid has one learning rate, or the protocol states no margin on loss."""
    lrs = numeric_axes(sel.grid).get(LR)
    protocol = protocol_of(sel)
    margin: Any = protocol.get("margin")
    if lrs is None or metric_of(protocol) != "loss" or not is_number(margin):
        return None
    scores, basis = _val_by_point(_runs_of(data, sel))
    others = {k: v for k, v in sel.point.items() if k != LR}
    line = [(float(p[LR]), loss) for p, loss in scores.values() if {k: p.get(k) for k in others} == others]
    if not line:
        return None
    best = min(loss for _, loss in line)
    within = tuple(sorted(lr for lr, loss in line if loss <= best + float(margin)))
    return Window(within, tuple(sorted(lr for lr, _ in line)), float(margin), basis)


def train_selections(data: StoreData) -> list[Selection]:
    train = data.runs_of("train")
    return [s for exp in dict.fromkeys(train["experiment"]) for s in select(train[train["experiment"] == exp])]


def _bound_text(e: Edge, chosen: float) -> str:
    """Where a search stopped at a declared bound, and what between the chosen point and the bound
    was not tried (a large factor can jump from the chosen point far past the bound)."""
    bound = num(e.bound, 3)
    said = f"searched until the next point ({num(e.beyond, 3)}) would pass the declared {e.side} bound {bound}"
    if e.bound is None or math.isclose(chosen, e.bound, rel_tol=1e-9):
        return f"{said}: the best may lie beyond it; widen the bounds to search further"
    return (
        f"{said}, so nothing between {num(chosen, 3)} and {bound} was tried: the best may lie there or beyond; "
        "give a smaller factor to search up to the bound, or widen the bounds"
    )


def edge_notes(data: StoreData) -> list[Problem]:
    """One note per (experiment, variant) whose chosen point lies on a grid edge, or where its
    search stopped at a declared bound."""
    out = []
    for sel in train_selections(data):
        for e in edges_of(sel):
            chose = f"chose {axis_name(e.axis)}={num(sel.point[e.axis], 3)} of {', '.join(num(v, 3) for v in e.values)}"
            if e.bound is None:
                kind, detail = EDGE_NOTE, f"{chose}: the best may lie beyond the grid, widen it"
            else:
                kind, detail = BOUND_NOTE, f"{chose}, {_bound_text(e, float(sel.point[e.axis]))}"
            out.append(Problem(kind, sel.label, f"{sel.experiment} ({sel.model_label})", e.text(), detail))
    return out


def grid_section(data: StoreData) -> list[Section]:
    """Per variant with a grid of two or more points: its choice, the edges it sits on and its
    learning-rate window ([] when no experiment has such a grid)."""
    raws, views = [], []
    for sel in train_selections(data):
        if len(sel.grid) < 2:
            continue
        axes, edges, window = numeric_axes(sel.grid), edges_of(sel), lr_window(data, sel)
        grid = "; ".join(f"{axis_name(k)} {', '.join(num(v, 3) for v in vs)}" for k, vs in axes.items())
        raws.append(
            {
                "experiment": sel.experiment,
                "variant": sel.label,
                "model": sel.model_label,
                "chosen_point": point_text(sel.point),
                "grid_points": len(sel.grid),
                "grid_edges": ", ".join(f"{axis_name(e.axis)} {e.side}" for e in edges),
                "lr_window_lo": window.within[0] if window else None,
                "lr_window_hi": window.within[-1] if window else None,
                "lr_window_n": len(window.within) if window else None,
                "lr_window_basis": window.basis if window else None,
            }
        )
        views.append(
            {
                "experiment": sel.experiment,
                "variant": sel.label,
                "model": sel.model_label,
                "chosen point": point_text(sel.point),
                "grid": grid or f"{len(sel.grid)} points",
                "on an edge": edge_clause(edges) or "no",
                "learning-rate window": window.text() if window else MISSING,
            }
        )
    if not raws:
        return []
    note = (
        "Edge: the chosen value is the smallest or largest of its axis, so the best may lie outside the grid; "
        "on an axis the tuning searched (a search window), only where the search stopped at a declared bound. "
        "Learning-rate window: the grid's learning rates whose mean validation loss lies within the protocol's "
        "margin of the best, at the chosen point's other settings, compared at one budget (the first tuning rung "
        "where successive halving ran); a dash where the grid has one learning rate or the protocol states no "
        "margin on loss (a decision on accuracy)."
    )
    table = Table("grid", "Chosen points on the grid", pd.DataFrame(raws), pd.DataFrame(views), note)
    return [Section("Grid: where each choice sits", tables=[table])]
