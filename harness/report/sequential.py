"""Decisions of experiments that add seeds until decided (``protocol.seeds: {min, max}``): the
group-sequential rule of attnbench.sequential in the report's Decision, and the method line
that names it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from attnbench.report.decision import EQUIVALENT, UNDETERMINED, Decision
from attnbench.report.load import StoreData
from attnbench.sequential import BETTER, WORSE, Design, decide_arrays

_OUTCOME = {BETTER: "better", WORSE: "worse", EQUIVALENT: EQUIVALENT}


def design_of(protocol: dict[str, Any]) -> Design | None:
    """The seeds-until-decided design a stored protocol names; None for fixed seeds."""
    rule = protocol.get("seeds")
    if not isinstance(rule, dict):
        return None
    return Design(int(rule["min"]), int(rule["max"]), rule.get("spending") or "obrien_fleming")


def decide_sequential(diffs: Sequence[float], margin: float | None, higher_is_better: bool, design: Design) -> Decision:
    """The decision on per-seed differences at the look of len(diffs) seeds: better / worse when
    the 95% repeated confidence interval excludes 0, equivalent when the 90% one lies inside
    ±margin; the interval shown is the 95% repeated one."""
    d = [float(x) for x in diffs if x is not None and math.isfinite(x)]
    n = len(d)
    if n == 0:
        return Decision(UNDETERMINED, None, None, None, 0, margin)
    mean = statistics.fmean(d)
    if n < max(2, design.min) or n > design.max:  # no look of the design at this n
        return Decision(UNDETERMINED, mean, None, None, n, margin)
    sd = statistics.stdev(d)
    code, lo, hi = decide_arrays(mean, sd, n, design, margin, higher_is_better)
    within = False
    if margin is not None:
        half = design.t_crit(n, 2.0 * design.alpha) * sd / math.sqrt(n)
        within = -margin < mean - half and mean + half < margin
    outcome = _OUTCOME.get(int(code), UNDETERMINED)
    return Decision(outcome, mean, float(lo), float(hi), n, margin, within)


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
