"""Each decision on fresh seeds: the replication runs of a row (``stage: replicate``, planned by
plan/replication.py or ``attnbench replicate``) are decided against the baseline's replication
runs by the same rule, and the two decisions compared:
  repeated        the fresh seeds give the same decision;
  undetermined    they decide nothing at their n and spread;
  reversed        they decide the opposite direction (better against worse);
  not repeated    they decide otherwise without reversing it (equivalence where a difference was
                  found, or a difference where equivalence was);
  not replicated  the run trained no replication seeds for the row."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attnbench.decision_words import (
    BETTER,
    EQUIVALENT,
    NOT_REPEATED,
    NOT_REPLICATED,
    REPEATED,
    REPLICATION_UNDETERMINED,
    REVERSED,
    WORSE,
)
from attnbench.plan.replication import round_label
from attnbench.report.decision import Decision
from attnbench.report.load import StoreData
from attnbench.report.paired import paired_decision
from attnbench.report.selection import Selection, fixed_options
from attnbench.report.values import grid_point, key_of

DECIDED = (BETTER, WORSE, EQUIVALENT)


@dataclass(frozen=True)
class Replication:
    """A decision and its replication on fresh seeds."""

    status: str  # repeated | undetermined on fresh seeds | reversed | not repeated | not replicated
    seeds: tuple[int, ...]
    decision: Decision | None  # the replication's own decision (None: not replicated)

    def text(self) -> str:
        """'repeated (seeds 6-11: +0.104 [+0.05, +0.16], n=6, exact p=0.031, worse)'."""
        if self.decision is None:
            return self.status
        return f"{self.status} (seeds {round_label(self.seeds)}: {self.decision.text(decimals=3)})"


def replicas_of(data: StoreData, sel: Selection) -> dict[str, Selection]:
    """``sel``'s replication runs at its chosen point, one Selection per round (by its seeds' label)."""
    runs = data.runs_of("train")
    want = key_of(sel.options)
    keep = [
        exp == sel.experiment
        and variant == sel.variant
        and coords.get("stage") == "replicate"
        and int(coords.get("model", 0)) == sel.model
        and grid_point(coords) == sel.point
        and key_of(fixed_options(str(variant), coords, config)) == want
        for exp, variant, coords, config in zip(
            runs["experiment"], runs["variant"], runs["coords"], runs["config"], strict=True
        )
    ]
    picked = runs[keep]
    rounds = [str(c.get("replication", "")) for c in picked["coords"]]
    return {r: dataclasses.replace(sel, runs=picked[[x == r for x in rounds]]) for r in dict.fromkeys(rounds)}


def compare(original: Decision, fresh: Decision) -> str:
    """The replication status of ``original`` given the ``fresh`` seeds' decision."""
    if fresh.outcome == original.outcome:
        return REPEATED
    if {fresh.outcome, original.outcome} == {BETTER, WORSE}:
        return REVERSED
    return NOT_REPEATED if fresh.outcome in DECIDED else REPLICATION_UNDETERMINED


def replication(
    data: StoreData,
    sel: Selection,
    base: Selection | None,
    original: Decision,
    metric: str,
    margin: float | None,
    setting: dict[str, Any] | None = None,
) -> list[Replication]:
    """The replications of ``sel``'s decision against ``base``, one per round of fresh seeds ([]
    where nothing was decided; a 'not replicated' entry where no round trained the row)."""
    if original.outcome not in DECIDED or base is None or base is sel:
        return []
    mine, theirs = replicas_of(data, sel), replicas_of(data, base)
    out = []
    for label in (r for r in mine if r in theirs):
        fresh, _ = paired_decision(data, mine[label], theirs[label], metric, margin, setting)
        seeds = set(int(s) for s in mine[label].runs["seed"]) & set(int(s) for s in theirs[label].runs["seed"])
        out.append(Replication(compare(original, fresh), tuple(sorted(seeds)), fresh))
    return out or [Replication(NOT_REPLICATED, (), None)]
