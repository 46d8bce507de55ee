"""Replication (``protocol.replicate: [seeds]``): once an experiment's decisions are made, every
row decided better, worse or equivalent against its baseline trains again at its chosen point on
fresh seeds, and the baseline with it, so the report can say whether each decision repeats on
seeds that took no part in choosing or deciding it (repeated, undetermined or reversed).

The decision read here is the report's: both rows learned on every seed, then the paired rule of
attnbench.stats.paired. Like halving.next_cells it is a pure function of stored outcomes, so a
resumed run plans the same cells; replication cells carry ``stage: replicate`` and never enter the
decision they test."""

from __future__ import annotations

from attnbench.plan.cells import Cell, rekey
from attnbench.plan.halving import Lookup
from attnbench.plan.seed_rounds import HIGHER_IS_BETTER, Arm, arm_of, paired_rows, seed_round, stored_round
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite
from attnbench.stats.learned import LEARNED, row_learned
from attnbench.stats.paired import decide_paired
from attnbench.stats.sequential import UNDETERMINED, Design

REPLICATE = "replicate"  # the stage of a replication cell


def round_label(seeds: list[int] | tuple[int, ...]) -> str:
    """'6-11' for a run of seeds, else '3, 5, 9': a replication round's name (its cells' coords)."""
    s = sorted(seeds)
    if s and s == list(range(s[0], s[-1] + 1)) and len(s) > 2:
        return f"{s[0]}-{s[-1]}"
    return ", ".join(str(x) for x in s)


def decided(mine: Arm, base: Arm, metric: str, margin: float | None, design: Design | None) -> bool:
    """Whether the report decides this row (better, worse or equivalent) on its stored seeds."""
    higher = HIGHER_IS_BETTER[metric]
    floor = mine.floor() if mine.floor() is not None else base.floor()
    if floor is not None:
        a = row_learned(mine.values, floor, higher, mine.answers)
        b = row_learned(base.values, floor, higher, base.answers)
        if a.status != LEARNED or b.status != LEARNED:
            return False
    diffs = [mine.values[s] - base.values[s] for s in sorted(set(mine.values) & set(base.values))]
    return decide_paired(diffs, margin, higher, design).code != UNDETERMINED


def _replicas(picked: list[Cell], seeds: list[int]) -> list[Cell]:
    """The replication cells of a row's chosen point at ``seeds``."""
    template = picked[0]
    coords = {k: v for k, v in template.coords.items() if k != "rung"} | {"replication": round_label(seeds)}
    return [rekey(template, seed=s, coords={**coords, "seed": s, "stage": REPLICATE}) for s in seeds]


def _experiment_replicas(exp: TrainExperiment, reported: list[Cell], lookup: Lookup) -> list[Cell]:
    protocol = exp.protocol
    assert protocol is not None and protocol.replicate is not None
    metric = protocol.metric or "loss"
    design = None
    if protocol.seeds is not None:
        design = Design(protocol.seeds.min, protocol.seeds.max, protocol.seeds.spending)
    out: dict[str, Cell] = {}
    for picked, base_picked in paired_rows(reported, lookup, protocol.baseline):
        mine, base = arm_of(picked, lookup, metric), arm_of(base_picked, lookup, metric)
        if decided(mine, base, metric, protocol.margin, design):
            for cell in _replicas(picked, protocol.replicate) + _replicas(base_picked, protocol.replicate):
                out[cell.key or repr((cell.variant, cell.seed, cell.coords))] = cell
    return list(out.values())


def next_replication_cells(suite: Suite, cells: list[Cell], lookup: Lookup) -> list[Cell]:
    """The replication cells of each experiment with ``protocol.replicate`` whose decisions are
    final: every tuned row at its final runs, every reported cell stored, no seed round to come."""
    out: list[Cell] = []
    for exp in suite.experiments:
        if not isinstance(exp, TrainExperiment) or exp.protocol is None or exp.protocol.replicate is None:
            continue
        reported = stored_round(exp, cells, lookup)
        if not reported:
            continue  # a rung or a round still running (or refused): wait
        if exp.protocol.seeds is not None and seed_round(exp, reported, lookup):
            continue  # seeds until decided still adds seeds: the decisions are not final
        out += _experiment_replicas(exp, reported, lookup)
    return out
