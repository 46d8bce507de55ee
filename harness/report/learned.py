"""Learned before compared: a row whose seeds are not beyond their null level (text: the
bigram's cross-entropy; tasks: the best binding-free predictor) has not learned at this budget,
and no comparison with it is better, worse or equivalent. A row whose seeds split (some beyond
the level, some not) is compared on the share of seeds that learned, never on a mean over the
two populations (attnbench.stats.learned holds the rules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attnbench.decision_words import BASELINE_NOT_LEARNED, not_compared, own_words
from attnbench.report.decision import Decision
from attnbench.report.floors import Floor
from attnbench.report.values import mean_ci
from attnbench.stats.learned import LEARNED, LEARNED_RULE_TEXT, NOT_LEARNED, SPLIT, UNKNOWN, row_learned, share_test

__all__ = [
    "LEARNED",
    "LEARNED_TEST_TEXT",
    "NOT_LEARNED",
    "SPLIT",
    "UNKNOWN",
    "Learned",
    "NotLearned",
    "gate",
    "learned",
]
LEARNED_TEST_TEXT = LEARNED_RULE_TEXT


@dataclass(frozen=True)
class Learned:
    """Whether one selection cleared its floor: ``status`` learned / not learned / learned on some
    seeds / unknown, with ``k`` of its ``n`` seeds beyond the floor."""

    status: str
    mean: float | None
    n: int
    floor: Floor | None
    k: int = 0

    def value_text(self, who: str) -> str:
        """'softmax 0.221, null 0.183, 0 of 3 seeds' (three decimals: these sit close to the floor)."""
        if self.mean is None or self.floor is None:
            return who
        return f"{who} {self.mean:.3f}, {self.floor.text()}, {self.k} of {self.n} seeds beyond it"

    def seeds_text(self) -> str:
        """'learned on 1 of 3 seeds' for a split row, else the status."""
        return own_words(self.status, self.k, self.n)


def learned(values: Mapping[int, float], floor: Floor | None, answers: Mapping[int, float] | None = None) -> Learned:
    """How many of a selection's seeds (seed -> test value) cleared ``floor`` (``answers``: the
    answer count behind each seed's accuracy, for the per-seed exact test)."""
    m = mean_ci(values.values())
    if floor is None:
        return Learned(UNKNOWN, m.mean, m.n, floor)
    seeds = row_learned(values, floor.value, floor.higher_is_better, answers)
    return Learned(seeds.status, m.mean, m.n, floor, seeds.k)


@dataclass(frozen=True)
class NotLearned(Decision):
    """A comparison that is not made on the metric: the baseline or the variant has not learned,
    or the seeds of one of them split across the null level (then decided on the share learned)."""

    reason: str = ""

    def text(self, unit: str = "", decimals: int | None = None) -> str:
        return self.reason


def gate(
    decision: Decision, mine: Learned, theirs: Learned, variant: str, baseline: str, alpha: float = 0.05
) -> Decision:
    """``decision`` when both rows learned on every seed; else a ``NotLearned`` reading e.g.
    "baseline not learned (softmax 0.22, null 0.18, 0 of 3 seeds beyond it)", or, where seeds split,
    the share test "learned on 1 of 3 seeds (softmax 3 of 3): cannot decide with 3 vs 3 seeds"
    (``alpha``: the share test's level at this look)."""
    d = decision
    outcome = not_compared(mine.status, theirs.status)  # the code names whose state stopped it
    if outcome is None:
        return decision
    if outcome == BASELINE_NOT_LEARNED:
        reason = f"{BASELINE_NOT_LEARNED} ({theirs.value_text(baseline)})"
    elif outcome == NOT_LEARNED:
        reason = f"{NOT_LEARNED} ({mine.value_text(variant)})"
    else:  # seeds split: no mean or interval over two populations of seeds
        reason = share_test(mine.k, mine.n, theirs.k, theirs.n, alpha).text(baseline)
        return NotLearned(outcome, None, None, None, d.n, d.margin, reason=reason)
    return NotLearned(outcome, d.mean, d.lo, d.hi, d.n, d.margin, reason=reason)
