"""Successive halving for a tuned protocol (``protocol.tuning``): which cells come next, given
the stored outcomes of the cells so far. Rung 0 is planned with the suite (plan/cells.py);
each later rung keeps the best 1/eta of the points at eta x the budget, and the survivor
runs at the experiment's budget on every seed (the "final" stage the report reads).

Where the grid declares a search window (plan/grid_window.py) and a rung's best point lies on
an edge of the values tried on its axis, the next point beyond joins that rung (same seeds,
same budget) before any point goes on: the rung is decided once its best point is inside the
window or stopped at a declared bound.

The choice reads validation data only (``protocol.tuning.criterion``: loss by default; accuracy
ranks only points beyond their null; near-ties within the tuning seeds' spread go to the lower
rate: plan/tuning_choice.py). It is a pure function of stored outcomes, so a resumed run,
another driver or a torchrun rank plans exactly the same cells."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from attnbench.plan.base import Budget, TrainSpec
from attnbench.plan.cells import Cell, rekey
from attnbench.plan.grid_window import GridWindow, extensions
from attnbench.plan.protocol import Tuning
from attnbench.plan.specs import AnyExperiment, TrainExperiment
from attnbench.plan.suite import Suite
from attnbench.plan.tuning_choice import rank, score_point

# key -> (status, summary) of a stored cell, or None while it is not stored
Lookup = Callable[[str], "tuple[str, dict[str, Any]] | None"]


def val_loss(outcome: tuple[str, dict[str, Any]] | None) -> float:
    """A finished cell's validation loss; failed or diverged points rank last."""
    if outcome is None or outcome[0] != "done":
        return math.inf
    v = outcome[1].get("val_loss")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.inf


def _scaled(budget: Budget, factor: int) -> Budget:
    kind = budget.kind()
    value = getattr(budget, kind) * factor
    return Budget(**{kind: int(value) if kind in ("steps", "tokens") else value})


def group_key(cell: Cell) -> tuple[str, str, int, str]:
    return cell.experiment, cell.variant, int(cell.coords.get("model", 0)), repr(cell.model.options)


def grid_point_of(cell: Cell) -> tuple[tuple[str, Any], ...]:
    skip = {"variant", "model", "d_model", "n_layer", "seed", "stage", "rung", "battery", "replication"}
    return tuple(sorted((k, v) for k, v in cell.coords.items() if k not in skip))


def point_text(cell: Cell) -> str:
    """A tuning cell's grid point as a reader names it: "lr=1, wd=0.1"."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in grid_point_of(cell)) or "-"


def _widened(best: list[Cell], cells: list[Cell], windows: dict[str, GridWindow]) -> list[Cell]:
    """The cells of the points beyond ``best`` (the rung's best point's cells, one per tuning
    seed) on each window axis where it lies on an edge of the values tried (every rung of
    ``cells``): the same seeds and budget, one setting changed."""
    tried = [dict(grid_point_of(c)) for c in cells]
    out = []
    for point in extensions(windows, dict(grid_point_of(best[0])), tried):
        if point in tried:  # a point the rung has (never re-planned: the search goes on, not round)
            continue
        changed = {k: v for k, v in point.items() if best[0].coords.get(k) != v}
        for c in best:
            out.append(rekey(c, spec=c.spec.model_copy(update=changed), coords={**c.coords, **changed}))
    return out


def _advance_group(cells: list[Cell], exp: TrainExperiment, tuning: Tuning, lookup: Lookup) -> list[Cell]:
    """The next cells of one (experiment, variant, model, options), or [] when its current
    rung is not finished yet or its final runs are already planned."""
    if any(c.coords.get("stage") == "final" for c in cells):
        return []
    rung = max(int(c.coords["rung"]) for c in cells)
    current = [c for c in cells if int(c.coords["rung"]) == rung]
    outcomes = {c.key: lookup(c.key) for c in current}
    if any(o is None for o in outcomes.values()):
        return []  # still running (or refused): wait
    by_point: dict[tuple, list[Cell]] = {}
    for c in current:
        by_point.setdefault(grid_point_of(c), []).append(c)
    criterion = tuning.criterion
    scored = [score_point(p, [outcomes[c.key] for c in by_point[p]], criterion) for p in by_point]
    if all(math.isinf(s.mean) for s in scored):
        return []  # every point failed or diverged: nothing to choose, no final runs (the report says so)
    ranked = [s.point for s in rank(scored)]  # best first; near-ties to the lower rate (plan/tuning_choice.py)
    wider = _widened(by_point[ranked[0]], cells, exp.windows())
    if wider:
        return wider
    full, seeds, eta = exp.train.budget, exp.seeds, tuning.eta
    keep = max(1, math.ceil(len(ranked) / eta))
    budget = _scaled(current[0].spec_as(TrainSpec).budget, eta)
    kind = full.kind()
    if keep > 1 and getattr(budget, kind) < getattr(full, kind):
        return [
            rekey(c, spec=c.spec.model_copy(update={"budget": budget}), coords={**c.coords, "rung": rung + 1})
            for p in ranked[:keep]
            for c in by_point[p]
        ]
    template = by_point[ranked[0]][0]
    spec = template.spec.model_copy(update={"budget": full})
    coords = {k: v for k, v in template.coords.items() if k != "rung"}
    return [rekey(template, spec=spec, seed=s, coords={**coords, "seed": s, "stage": "final"}) for s in seeds]


def _tuned(exp: AnyExperiment) -> tuple[TrainExperiment, Tuning]:
    """A train experiment with protocol.tuning: the only kind that plans tuning cells."""
    if not isinstance(exp, TrainExperiment) or exp.protocol is None or exp.protocol.tuning is None:
        raise TypeError(f"experiment {exp.name!r} has tuning cells but does not tune")
    return exp, exp.protocol.tuning


def next_cells(suite: Suite, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The cells that become runnable now that ``lookup`` knows the outcomes of ``cells``:
    the next rung of each tuned group whose current rung is stored, or its final runs."""
    out: list[Cell] = []
    experiments = {e.name: e for e in suite.experiments}
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        if c.coords.get("stage") in ("tune", "final"):
            groups.setdefault(group_key(c), []).append(c)
    for (exp_name, *_), group in groups.items():
        exp, tuning = _tuned(experiments[exp_name])
        out += _advance_group(group, exp, tuning, lookup)
    return out


def nothing_chosen(cells: list[Cell], lookup: Lookup) -> list[str]:
    """One line per tuned group whose last rung is stored with every point failed or diverged:
    nothing was chosen there, so it has no final runs (the run says so; the report's tuning
    trail lists each point's status)."""
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        if c.coords.get("stage") in ("tune", "final"):
            groups.setdefault(group_key(c), []).append(c)
    out = []
    for (exp, variant, *_), group in groups.items():
        if any(c.coords.get("stage") == "final" for c in group):
            continue
        rung = max(int(c.coords["rung"]) for c in group)
        outcomes = [lookup(c.key) for c in group if int(c.coords["rung"]) == rung]
        if outcomes and all(o is not None and math.isinf(val_loss(o)) for o in outcomes):
            statuses = ", ".join(sorted({o[0] for o in outcomes if o is not None}))
            out.append(
                f"{exp}, {variant}: every tuning point of rung {rung} ended {statuses}, so nothing was chosen and "
                "no final runs were trained; narrow the grid (e.g. smaller learning rates) and run again"
            )
    return out


def tuned_source_error(suite: Suite, src: str) -> str | None:
    """Why experiment ``src`` cannot feed a finetune experiment: its reported cells are planned
    only as its tuning finishes, after the suite is linked (lm_eval waits for them:
    plan/after_tuning.py)."""
    exp = next((e for e in suite.experiments if e.name == src), None)
    if exp is not None and getattr(getattr(exp, "protocol", None), "tuning", None) is not None:
        return (
            f"experiment {src!r} tunes by successive halving (protocol.tuning), so its trained cells are "
            "not known before it runs; evaluate a train experiment without protocol.tuning"
        )
    return None


def planned_total(suite: Suite, cells: list[Cell]) -> int:
    """How many cells the suite will run in all once every rung is decided (for progress)."""
    total = 0
    experiments = {e.name: e for e in suite.experiments}
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        if c.coords.get("stage") == "tune" and c.coords.get("rung") == 0:
            groups.setdefault(group_key(c), []).append(c)
        elif c.coords.get("stage") is None:
            total += 1
    for (exp_name, *_), group in groups.items():
        exp, t = _tuned(experiments[exp_name])
        kind = exp.train.budget.kind()
        points, budget = len({grid_point_of(c) for c in group}), getattr(t.budget, kind)
        total += points * len(t.seeds)
        while True:
            keep, budget = max(1, math.ceil(points / t.eta)), budget * t.eta
            if keep == 1 or budget >= getattr(exp.train.budget, kind):
                break
            points = keep
            total += points * len(t.seeds)
        total += len(exp.seeds)
    return total
