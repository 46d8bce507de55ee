"""Seeds until decided (``protocol.seeds: {min, max}``): which seed cells come next, given the
stored outcomes. The first round (seeds 0..min-1) is planned with the suite; once every cell of
an experiment is stored, each row (variant, model size, options) still undetermined against the
baseline gets the next seed at its chosen grid point, and the baseline gets that seed too (pairs
need the same seeds). Decided rows stop; no row goes past ``max``; and a row stops where it or its
baseline sits at or below its null level (no comparison is made with a model that has not learned,
so more seeds there could not decide anything).

The decision is the one the report prints: the group-sequential rule of attnbench.sequential on
the paired test metric of the finished seeds. Like halving.next_cells it is a pure function of
stored outcomes, so a resumed run plans the same cells."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from attnbench.plan.cells import Cell, rekey
from attnbench.plan.halving import Lookup, grid_point_of, group_key, val_loss
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite
from attnbench.sequential import UNDETERMINED, Design, decide_arrays

HIGHER_IS_BETTER = {"loss": False, "accuracy": True}
Row = tuple[Any, ...]  # (experiment, variant, model, options)


def _chosen(cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The cells of a row's chosen grid point: the lowest mean validation loss over its seeds."""
    by_point: dict[tuple, list[Cell]] = {}
    for c in cells:
        by_point.setdefault(grid_point_of(c), []).append(c)

    def score(p: tuple) -> float:
        losses = [v for c in by_point[p] if math.isfinite(v := val_loss(lookup(c.key)))]
        return statistics.fmean(losses) if losses else math.inf

    return by_point[min(by_point, key=score)]


def _values(cells: list[Cell], lookup: Lookup, metric: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for c in cells:
        o = lookup(c.key)
        v = o[1].get(f"test_{metric}") if o is not None and o[0] == "done" else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[c.seed] = float(v)
    return out


FLOOR_FIELD = {"loss": "test_floor_bigram_loss", "accuracy": "test_guess_accuracy"}  # as report.floors reads


def at_floor(cells: list[Cell], lookup: Lookup, metric: str) -> bool:
    """Whether a row's mean test metric is not beyond its stored null level (text: the bigram's
    loss; tasks: guessing). Rows stored without floors are never at it."""
    values, floors = [], []
    for c in cells:
        o = lookup(c.key)
        if o is None or o[0] != "done":
            continue
        value, floor = o[1].get(f"test_{metric}"), o[1].get(FLOOR_FIELD[metric])
        if isinstance(value, (int, float)) and isinstance(floor, (int, float)):
            values.append(float(value))
            floors.append(float(floor))
    if not values:
        return False
    beyond = statistics.fmean(values) - statistics.fmean(floors)
    return beyond <= 0 if HIGHER_IS_BETTER[metric] else beyond >= 0


def undetermined(mine: dict[int, float], base: dict[int, float], design: Design, metric: str) -> bool:
    """Whether the paired comparison of two rows' per-seed values is still undetermined."""
    diffs = np.array([mine[s] - base[s] for s in sorted(set(mine) & set(base))])
    n = len(diffs)
    if n < design.min:
        return True  # a seed failed: the first look needs ``min`` pairs
    if n > design.max:
        return False
    code, _, _ = decide_arrays(diffs.mean(), diffs.std(ddof=1), n, design, None, HIGHER_IS_BETTER[metric])
    return int(code) == UNDETERMINED


def _experiment_round(exp: TrainExperiment, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    protocol = exp.protocol
    if protocol is None or protocol.seeds is None:
        return []
    rule = protocol.seeds
    design = Design(rule.min, rule.max, rule.spending)
    metric = protocol.metric or "loss"
    rows: dict[Row, list[Cell]] = {}
    for c in cells:
        rows.setdefault(group_key(c), []).append(c)
    chosen = {row: _chosen(group, lookup) for row, group in rows.items()}
    out: dict[str, Cell] = {}
    for row, picked in chosen.items():
        if row[1] == protocol.baseline:
            continue
        base_row = next((r for r in chosen if r[1] == protocol.baseline and r[2] == row[2]), None)
        if base_row is None:
            continue
        planned = {c.seed for c in picked}
        if len(planned) >= rule.max:
            continue
        if at_floor(picked, lookup, metric) or at_floor(chosen[base_row], lookup, metric):
            continue  # not learned at this budget: no seed count decides against it
        mine, base = _values(picked, lookup, metric), _values(chosen[base_row], lookup, metric)
        if not undetermined(mine, base, design, metric):
            continue
        seed = next(s for s in range(rule.max + len(planned) + 1) if s not in planned)
        for group in (picked, chosen[base_row]):
            if seed in {c.seed for c in group}:
                continue
            template = group[0]
            new = rekey(template, seed=seed, coords={**template.coords, "seed": seed})
            out[new.key or repr((row, new.variant, seed))] = new
    return list(out.values())


def next_seed_cells(suite: Suite, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The next seed round of each experiment with ``protocol.seeds`` whose cells are all
    stored: one more seed for every undetermined row and its baseline."""
    out: list[Cell] = []
    for exp in suite.experiments:
        if not isinstance(exp, TrainExperiment) or exp.protocol is None or exp.protocol.seeds is None:
            continue
        mine = [c for c in cells if c.experiment == exp.name]
        tuned = {group_key(c) for c in mine if c.coords.get("stage") == "tune"}
        reported = [c for c in mine if c.coords.get("stage") in (None, "final")]
        if len({group_key(c) for c in reported if c.coords.get("stage") == "final"}) < len(tuned):
            continue  # a tuned row has not reached its final runs yet
        if not reported or any(lookup(c.key) is None for c in reported):
            continue  # this round is still running (or was refused): wait
        out += _experiment_round(exp, reported, lookup)
    return out


def sequential(suite: Suite) -> bool:
    """Whether any experiment of ``suite`` adds seeds until decided."""
    return any(getattr(getattr(e, "protocol", None), "seeds", None) is not None for e in suite.experiments)
