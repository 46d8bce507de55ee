"""Seeds until decided (``protocol.seeds: {min, max}``): which seed cells come next, given the
stored outcomes. The first round (seeds 0..min-1) is planned with the suite; once every cell of
an experiment is stored, each row (variant, model size, options) still undetermined against the
baseline gets the next seed at its chosen grid point, and the baseline gets that seed too (pairs
need the same seeds). Decided rows stop (equivalent within the protocol's margin among them); no
row goes past ``max``; a row stops where it or its baseline learned on no seed (no comparison is
made with a model that has not learned, so more seeds there could not decide anything); and a row
whose seeds split across the null level goes on while the share test is undecided.

The decision is the one the report prints: attnbench.stats.paired (the group-sequential t of
attnbench.stats.sequential, the shape checks and the exact test) on the paired test metric of the
finished seeds. Like halving.next_cells it is a pure function of
stored outcomes, so a resumed run plans the same cells."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnbench.plan.cells import Cell, rekey
from attnbench.plan.grid_window import finite_number
from attnbench.plan.halving import Lookup, grid_point_of, group_key, val_loss
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite
from attnbench.stats.learned import NOT_LEARNED, SPLIT, row_learned, share_test
from attnbench.stats.paired import decide_paired
from attnbench.stats.sequential import UNDETERMINED, Design

HIGHER_IS_BETTER = {"loss": False, "accuracy": True}
Row = tuple[Any, ...]  # (experiment, variant, model, options)


def chosen_cells(cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The cells of a row's chosen grid point: the lowest mean validation loss over its seeds."""
    by_point: dict[tuple, list[Cell]] = {}
    for c in cells:
        by_point.setdefault(grid_point_of(c), []).append(c)

    def score(p: tuple) -> float:
        losses = [v for c in by_point[p] if math.isfinite(v := val_loss(lookup(c.key)))]
        return statistics.fmean(losses) if losses else math.inf

    return by_point[min(by_point, key=score)]


FLOOR_FIELD = {"loss": "test_floor_bigram_loss", "accuracy": "test_guess_accuracy"}  # as report.floors reads


@dataclass(frozen=True)
class Arm:
    """One row's finished seeds: test value, null level and answer count per seed."""

    values: dict[int, float]
    floors: dict[int, float]
    answers: dict[int, float]

    def floor(self) -> float | None:
        return statistics.fmean(self.floors.values()) if self.floors else None


def arm_of(cells: list[Cell], lookup: Lookup, metric: str) -> Arm:
    """The stored outcomes of a row's cells (floors and counts where the summaries hold them)."""
    values: dict[int, float] = {}
    floors: dict[int, float] = {}
    answers: dict[int, float] = {}
    for c in cells:
        o = lookup(c.key)
        if o is None or o[0] != "done":
            continue
        value, floor, count = (
            finite_number(o[1].get(k)) for k in (f"test_{metric}", FLOOR_FIELD[metric], "test_answers_total")
        )
        if value is not None:
            values[c.seed] = value
            if floor is not None:
                floors[c.seed] = floor
            if count is not None:
                answers[c.seed] = count
    return Arm(values, floors, answers)


def still_open(mine: Arm, base: Arm, design: Design, metric: str, margin: float | None) -> bool:
    """Whether another seed could still decide a row against its baseline, by the report's rule:
    no row where either has not learned on any seed (no comparison is made with it); where the
    seeds of either split across the null level, while the share test at this look is undecided;
    else while the paired decision (with the protocol's margin: an equivalent row is decided) is
    undetermined. Never past ``max``."""
    higher = HIGHER_IS_BETTER[metric]
    floor = mine.floor() if mine.floor() is not None else base.floor()
    a = row_learned(mine.values, floor, higher, mine.answers)
    b = row_learned(base.values, floor, higher, base.answers)
    if NOT_LEARNED in (a.status, b.status):
        return False  # not learned at this budget: no seed count decides against it
    diffs = np.array([mine.values[s] - base.values[s] for s in sorted(set(mine.values) & set(base.values))])
    n = len(diffs)
    if n < design.min:
        return True  # a seed failed: the first look needs ``min`` pairs
    if n >= design.max:
        return False
    if SPLIT in (a.status, b.status):
        return not share_test(a.k, a.n, b.k, b.n, design.look_alpha(n)).decided
    return decide_paired(diffs.tolist(), margin, higher, design).code == UNDETERMINED


def paired_rows(cells: list[Cell], lookup: Lookup, baseline: str) -> Iterator[tuple[list[Cell], list[Cell]]]:
    """Each non-baseline row's chosen cells with its baseline's at the same model size."""
    rows: dict[Row, list[Cell]] = {}
    for c in cells:
        rows.setdefault(group_key(c), []).append(c)
    chosen = {row: chosen_cells(group, lookup) for row, group in rows.items()}
    for row, picked in chosen.items():
        base_row = next((r for r in chosen if r[1] == baseline and r[2] == row[2]), None)
        if row[1] != baseline and base_row is not None:
            yield picked, chosen[base_row]


def seed_round(exp: TrainExperiment, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    protocol = exp.protocol
    if protocol is None or protocol.seeds is None:
        return []
    rule = protocol.seeds
    design = Design(rule.min, rule.max, rule.spending)
    metric = protocol.metric or "loss"
    out: dict[str, Cell] = {}
    for picked, base_picked in paired_rows(cells, lookup, protocol.baseline):
        planned = {c.seed for c in picked}
        if len(planned) >= rule.max:
            continue
        mine, base = arm_of(picked, lookup, metric), arm_of(base_picked, lookup, metric)
        if not still_open(mine, base, design, metric, protocol.margin):
            continue
        seed = next(s for s in range(rule.max + len(planned) + 1) if s not in planned)
        for group in (picked, base_picked):
            if seed in {c.seed for c in group}:
                continue
            template = group[0]
            new = rekey(template, seed=seed, coords={**template.coords, "seed": seed})
            out[new.key or repr((new.variant, new.coords, seed))] = new
    return list(out.values())


def stored_round(exp: TrainExperiment, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The experiment's reported cells (final, or untuned) once every tuned row has reached its
    final runs and every one of them is stored; [] while a rung or a round is still running (or
    was refused)."""
    mine = [c for c in cells if c.experiment == exp.name]
    tuned = {group_key(c) for c in mine if c.coords.get("stage") == "tune"}
    reported = [c for c in mine if c.coords.get("stage") in (None, "final")]
    if len({group_key(c) for c in reported if c.coords.get("stage") == "final"}) < len(tuned):
        return []
    return [] if any(lookup(c.key) is None for c in reported) else reported


def next_seed_cells(suite: Suite, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The next seed round of each experiment with ``protocol.seeds`` whose cells are all
    stored: one more seed for every undetermined row and its baseline."""
    out: list[Cell] = []
    for exp in suite.experiments:
        if not isinstance(exp, TrainExperiment) or exp.protocol is None or exp.protocol.seeds is None:
            continue
        reported = stored_round(exp, cells, lookup)
        if reported:
            out += seed_round(exp, reported, lookup)
    return out


def sequential(suite: Suite) -> bool:
    """Whether any experiment of ``suite`` adds seeds until decided."""
    return any(getattr(getattr(e, "protocol", None), "seeds", None) is not None for e in suite.experiments)


def adds_cells(suite: Suite) -> bool:
    """Whether stored outcomes can add cells to ``suite`` beyond its tuning: seeds until decided,
    or replication of its decisions on fresh seeds (``protocol.replicate``)."""
    return sequential(suite) or any(
        getattr(getattr(e, "protocol", None), "replicate", None) is not None for e in suite.experiments
    )
