"""Every paired comparison ends in a decision: better, worse, equivalent within a stated margin
(two one-sided t tests, TOST), or undetermined.

On the per-seed differences d = variant - baseline (n seeds), the paired t statistic with
critical values that hold for normal and skewed differences (attnbench.sequential: one look of
n seeds; Student t alone called skewed variants better or worse in 11-15% of null comparisons):
  better / worse   the 95% interval of mean(d) excludes 0 (direction by the metric's sense);
  equivalent       both one-sided 95% bounds lie inside (-margin, +margin): both one-sided tests
                   at 5% reject |mean(d)| >= margin (Schuirmann 1987);
  undetermined     neither: the run cannot tell, at this n and spread.
A difference that is both detected and inside the margin is reported as the difference
(better / worse) with "within the margin" added."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from attnbench import sequential as seq
from attnbench.decision_words import (
    BETTER,
    EQUIVALENT,
    EQUIVALENT_WITHIN,
    NO_PAIRED_SEEDS,
    UNDETERMINED,
    WITHIN_MARGIN,
    WORSE,
)

__all__ = ["BETTER", "EQUIVALENT", "TEST_TEXT", "UNDETERMINED", "WORSE", "Decision", "decide"]
TEST_TEXT = (
    "paired t on per-seed differences with critical values calibrated on normal and skewed differences "
    "(95% interval for a difference; equivalence: two one-sided tests at 5%, each bound inside ±margin); "
    + seq.ASSUMPTION_TEXT
)


@dataclass(frozen=True)
class Decision:
    outcome: str  # better | worse | equivalent | undetermined
    mean: float | None
    lo: float | None  # 95% interval of the mean difference
    hi: float | None
    n: int
    margin: float | None
    within_margin: bool = False  # the 90% interval lies inside ±margin

    def text(self, unit: str = "", decimals: int | None = None) -> str:
        """e.g. "-0.56 [-0.61, -0.51], n=3, worse" or "+0.02 [-0.01, +0.05], n=3, equivalent within ±0.05"
        (3 significant digits, or ``decimals`` fixed ones)."""
        if self.mean is None:
            return NO_PAIRED_SEEDS
        fmt = "+.3g" if decimals is None else f"+.{decimals}f"
        head = f"{self.mean:{fmt}}{unit}"
        if self.lo is not None and self.hi is not None:
            head += f" [{self.lo:{fmt}}, {self.hi:{fmt}}]"
        return f"{head}, n={self.n}, {self.word()}"

    def word(self) -> str:
        """The decision as printed: the outcome, "equivalent within ±margin", or a detected
        difference with "(within ±margin)" added where it also lies inside the margin."""
        if self.outcome == EQUIVALENT:
            return EQUIVALENT_WITHIN.format(margin=f"{self.margin:g}")
        if self.within_margin and self.outcome in (BETTER, WORSE):
            return f"{self.outcome} {WITHIN_MARGIN.format(margin=f'{self.margin:g}')}"
        return self.outcome


_OUTCOME = {seq.BETTER: BETTER, seq.WORSE: WORSE, seq.EQUIVALENT: EQUIVALENT}


def decide(
    diffs: Sequence[float], margin: float | None, higher_is_better: bool, design: seq.Design | None = None
) -> Decision:
    """The decision on per-seed differences ``diffs`` (variant - baseline) at the look of
    len(diffs) seeds of ``design`` (None: fixed seeds, one look); the interval shown is the
    two-sided 95% one (a repeated one for a sequential design)."""
    diffs = [float(d) for d in diffs if d is not None and math.isfinite(d)]
    n = len(diffs)
    if n == 0:
        return Decision(UNDETERMINED, None, None, None, 0, margin)
    mean = statistics.fmean(diffs)
    design = design or seq.Design(n, n)
    if n < max(2, design.min) or n > design.max:  # no look of the design at this n
        return Decision(UNDETERMINED, mean, None, None, n, margin)
    sd = statistics.stdev(diffs)
    code, lo, hi = seq.decide_arrays(mean, sd, n, design, margin, higher_is_better)
    within = False
    if margin is not None:
        half = design.t_crit(n, design.alpha, "one") * sd / math.sqrt(n)
        within = -margin < mean - half and mean + half < margin
    return Decision(_OUTCOME.get(int(code), UNDETERMINED), mean, float(lo), float(hi), n, margin, within)
