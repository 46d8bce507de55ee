"""Whether a model learned, seed by seed and row by row, and the exact test on the share of seeds
that learned (pure numpy/scipy; plan/ (next seed round) and report/ (decisions) both read it).

A seed learned when its test metric is beyond its null level (the best predictor without the
capability under test: n-gram models for text, binding-free predictors for tasks):
  accuracy with its answer count N   the one-sided exact binomial test of "accuracy <= null" at
                                     2.5% rejects: x correct of N with P(X >= x | N, null) <= 0.025;
  otherwise (loss, or no count)      the value is beyond the level.
A row of n seeds is
  learned                 every seed learned;
  not learned             no seed learned;
  learned on k of n       some did and some did not. Its values are two populations (a circuit
                          formed on some seeds and not on others), so neither their mean nor a t
                          interval over them decides anything: the row is compared with the
                          baseline on the share of seeds that learned, by Boschloo's exact
                          unconditional test (two-sided; a Barnard-type test, uniformly more
                          powerful than Fisher's). Where no outcome at these seed counts could
                          reach the level, the words are "cannot decide with n1 vs n2 seeds".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from attnbench.decision_words import (
    CANNOT_DECIDE,
    LEARNED,
    LEARNED_ON,
    LEARNS_ON_FEWER,
    LEARNS_ON_MORE,
    NOT_LEARNED,
    SHARE_UNDETERMINED,
    SPLIT,
    UNKNOWN,
)

SEED_ALPHA = 0.025  # one-sided level of the per-seed binomial test
SHARE_TEST_TEXT = (
    "seeds that split across the null level: the share learned against the baseline's, Boschloo's exact "
    "test (two-sided 5%)"
)
LEARNED_RULE_TEXT = (
    "a seed learned when its test value is beyond the null level (accuracy: one-sided exact binomial "
    "test at 2.5% on its answers); a row learned when every seed did"
)


def seed_learned(value: float, floor: float, higher_is_better: bool, answers: float | None = None) -> bool:
    """Whether one seed's ``value`` is beyond ``floor``: an exact binomial test on ``answers``
    scored answers for an accuracy with a count, else the plain comparison."""
    if not higher_is_better:
        return value < floor
    if answers is None or not math.isfinite(answers) or answers < 1 or not 0.0 <= floor < 1.0:
        return value > floor
    from scipy import stats  # scipy loads in a second: only when a row is judged

    n = int(round(answers))
    correct = int(round(value * n))
    return correct > floor * n and float(stats.binom.sf(correct - 1, n, floor)) <= SEED_ALPHA


@dataclass(frozen=True)
class SeedsLearned:
    """A row's seeds against its null level: ``k`` of ``n`` learned, and the row's status."""

    status: str  # learned | not learned | learned on some seeds | unknown
    k: int
    n: int

    def text(self) -> str:
        """'learned on 1 of 3 seeds', 'learned (3 of 3 seeds)', 'not learned (0 of 3 seeds)'."""
        if self.status == SPLIT:
            return LEARNED_ON.format(k=self.k, n=self.n)
        if self.status == UNKNOWN:
            return UNKNOWN
        return f"{self.status} ({self.k} of {self.n} seeds)"


def row_learned(
    values: Mapping[int, float],
    floor: float | None,
    higher_is_better: bool,
    answers: Mapping[int, float] | None = None,
) -> SeedsLearned:
    """How many of a row's seeds (seed -> test value) learned; unknown without a floor or seeds."""
    n = len(values)
    if floor is None or not math.isfinite(floor) or n == 0:
        return SeedsLearned(UNKNOWN, 0, n)
    counts = answers or {}
    k = sum(seed_learned(v, floor, higher_is_better, counts.get(s)) for s, v in values.items())
    status = LEARNED if k == n else NOT_LEARNED if k == 0 else SPLIT
    return SeedsLearned(status, k, n)


@dataclass(frozen=True)
class ShareTest:
    """The exact test of two rows' shares of learned seeds."""

    p: float | None  # None: no outcome at these seed counts could reach ``alpha``
    least_p: float  # the smallest p any outcome at these seed counts could give
    k: tuple[int, int]  # learned seeds: the variant's, the baseline's
    n: tuple[int, int]
    alpha: float

    @property
    def decided(self) -> bool:
        return self.p is not None and self.p <= self.alpha

    @property
    def outcome(self) -> str:
        """The decision word: learns on fewer / more seeds, share undetermined, or cannot decide
        with n1 vs n2 seeds (no outcome at these seed counts could reach ``alpha``)."""
        if self.p is None:
            return CANNOT_DECIDE.format(n1=self.n[0], n2=self.n[1])
        if not self.decided:
            return SHARE_UNDETERMINED
        return LEARNS_ON_FEWER if self.k[0] / self.n[0] < self.k[1] / self.n[1] else LEARNS_ON_MORE

    def text(self, baseline: str) -> str:
        """'learned on 1 of 3 seeds (softmax 3 of 3): cannot decide with 3 vs 3 seeds'."""
        head = f"{LEARNED_ON.format(k=self.k[0], n=self.n[0])} ({baseline} {self.k[1]} of {self.n[1]})"
        return f"{head}: {self.outcome}" + ("" if self.p is None else f", Boschloo p={self.p:.3f}")


@lru_cache(maxsize=512)
def _boschloo(k1: int, n1: int, k2: int, n2: int) -> float:
    from scipy import stats

    table = [[k1, k2], [n1 - k1, n2 - k2]]  # rows learned / not; columns variant / baseline
    return float(stats.boschloo_exact(table, alternative="two-sided").pvalue)


def share_test(k1: int, n1: int, k2: int, n2: int, alpha: float = 0.05) -> ShareTest:
    """Boschloo's two-sided exact test of k1 of n1 learned seeds against k2 of n2."""
    least = min(_boschloo(n1, n1, 0, n2), _boschloo(0, n1, n2, n2))  # the most extreme tables
    if least > alpha:
        return ShareTest(None, least, (k1, k2), (n1, n2), alpha)
    p = 1.0 if k1 * n2 == k2 * n1 else _boschloo(k1, n1, k2, n2)
    return ShareTest(p, least, (k1, k2), (n1, n2), alpha)
