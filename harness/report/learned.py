"""Learned before compared: a variant whose test metric is not beyond its null level (text: the
bigram's cross-entropy; tasks: guessing) with 95% confidence has not learned at this budget, and
no comparison with it is better, worse or equivalent.

Test: the two-sided 95% Student-t interval of the mean over seeds (as the tables show it) lies
wholly on the better side of the floor, i.e. a one-sided one-sample t test at 2.5%."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from attnbench.report.decision import Decision
from attnbench.report.floors import Floor
from attnbench.report.values import mean_ci

LEARNED, NOT_LEARNED, UNKNOWN = "learned", "not learned", "unknown"
NOT_TESTABLE = "not testable at this budget"
LEARNED_TEST_TEXT = "learned: the 95% interval of the mean over seeds (Student t) lies beyond the null level"


@dataclass(frozen=True)
class Learned:
    """Whether one selection cleared its floor: ``status`` learned / not learned / unknown."""

    status: str
    mean: float | None
    n: int
    floor: Floor | None

    def value_text(self, who: str) -> str:
        """'softmax 0.221, guessing 0.183' (three decimals: these sit close to the floor)."""
        if self.mean is None or self.floor is None:
            return who
        return f"{who} {self.mean:.3f}, {self.floor.text()}"


def learned(values: Iterable[float], floor: Floor | None) -> Learned:
    """Learned when the interval clears ``floor``; not learned when it does not (or, with one seed,
    when the value is not even beyond it); unknown without a floor or with one seed beyond it."""
    m = mean_ci(values)
    if floor is None or m.mean is None:
        return Learned(UNKNOWN, m.mean, m.n, floor)
    sign = 1.0 if floor.higher_is_better else -1.0
    if sign * (m.mean - floor.value) <= 0:
        return Learned(NOT_LEARNED, m.mean, m.n, floor)
    if m.lo is None or m.hi is None:
        return Learned(UNKNOWN, m.mean, m.n, floor)
    bound = m.lo if floor.higher_is_better else m.hi
    return Learned(LEARNED if sign * (bound - floor.value) > 0 else NOT_LEARNED, m.mean, m.n, floor)


@dataclass(frozen=True)
class NotLearned(Decision):
    """A comparison that is not made: the baseline or the variant has not learned."""

    reason: str = ""

    def text(self, unit: str = "", decimals: int | None = None) -> str:
        return self.reason


def gate(decision: Decision, mine: Learned, theirs: Learned, variant: str, baseline: str) -> Decision:
    """``decision`` unless the baseline (first) or the variant has not learned: then a ``NotLearned``
    reading e.g. "baseline not learned (softmax 0.22, guessing 0.18)"."""
    if theirs.status == NOT_LEARNED:
        reason = f"baseline not learned ({theirs.value_text(baseline)})"
    elif mine.status == NOT_LEARNED:
        reason = f"not learned ({mine.value_text(variant)})"
    else:
        return decision
    d = decision
    return NotLearned(NOT_LEARNED, d.mean, d.lo, d.hi, d.n, d.margin, False, reason)
