"""Decisions of experiments that add seeds until decided (``protocol.seeds: {min, max}``): the
group-sequential rule of attnbench.sequential in the report's Decision, and the method line
that names it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnbench.report.decision import Decision, decide
from attnbench.report.load import StoreData
from attnbench.sequential import Design


def design_of(protocol: dict[str, Any]) -> Design | None:
    """The seeds-until-decided design a stored protocol names; None for fixed seeds."""
    rule = protocol.get("seeds")
    if not isinstance(rule, dict):
        return None
    return Design(int(rule["min"]), int(rule["max"]), rule.get("spending") or "obrien_fleming")


def decide_sequential(diffs: Sequence[float], margin: float | None, higher_is_better: bool, design: Design) -> Decision:
    """The decision at the look of len(diffs) seeds of ``design`` (report.decision.decide with
    that design): better / worse when the 95% repeated confidence interval excludes 0,
    equivalent when both one-sided bounds lie inside ±margin."""
    return decide(diffs, margin, higher_is_better, design)


def method_text(data: StoreData, fixed: str) -> str:
    """``fixed`` (the fixed-seed test), with the sequential design of each experiment that
    adds seeds until decided."""
    designs: dict[str, list[str]] = {}
    for exp, summary in zip(data.runs["experiment"], data.runs["summary"], strict=True):
        design = design_of(summary.get("protocol") or {}) if isinstance(summary, dict) else None
        if design is not None:
            designs.setdefault(design.method(), [])
            if exp not in designs[design.method()]:
                designs[design.method()].append(exp)
    if not designs:
        return fixed
    seq = "; ".join(f"{', '.join(exps)}: {m}" for m, exps in designs.items())
    return (
        f"{fixed}. Seeds until decided ({seq}): a row undetermined after a round gets another seed, and its "
        "decision reads the 95% repeated confidence interval (90% for equivalence), valid under that stopping"
    )
