"""Every paired comparison ends in a decision: better, worse, equivalent within a stated margin
(two one-sided t tests, TOST), or undetermined.

On the per-seed differences d = variant - baseline (n seeds, Student t with n - 1 df):
  better / worse   the 95% interval of mean(d) excludes 0 (direction by the metric's sense);
  equivalent       the 90% interval lies inside (-margin, +margin): both one-sided tests at
                   5% reject |mean(d)| >= margin (Schuirmann 1987);
  undetermined     neither: the run cannot tell, at this n and spread.
A difference that is both detected and inside the margin is reported as the difference
(better / worse) with "within the margin" added."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

BETTER, WORSE, EQUIVALENT, UNDETERMINED = "better", "worse", "equivalent", "undetermined"
TEST_TEXT = (
    "paired t on per-seed differences (95% interval for a difference; equivalence: two one-sided "
    "t tests at 5%, i.e. the 90% interval inside ±margin)"
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
        """e.g. "-0.56 [-0.61, -0.51], n=3, worse" or "+0.02 [-0.01, +0.05], n=3, equivalent within 0.05"
        (3 significant digits, or ``decimals`` fixed ones)."""
        if self.mean is None:
            return "no paired seeds"
        fmt = "+.3g" if decimals is None else f"+.{decimals}f"
        head = f"{self.mean:{fmt}}{unit}"
        if self.lo is not None and self.hi is not None:
            head += f" [{self.lo:{fmt}}, {self.hi:{fmt}}]"
        tail = self.outcome
        if self.outcome == EQUIVALENT or self.within_margin:
            tail += f" within ±{self.margin:g}" if self.outcome == EQUIVALENT else f" (within ±{self.margin:g})"
        return f"{head}, n={self.n}, {tail}"


def _interval(diffs: Sequence[float], level: float) -> tuple[float, float] | tuple[None, None]:
    n = len(diffs)
    if n < 2:
        return None, None
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def decide(diffs: Sequence[float], margin: float | None, higher_is_better: bool) -> Decision:
    """The decision on per-seed differences ``diffs`` (variant - baseline)."""
    diffs = [float(d) for d in diffs if d is not None and math.isfinite(d)]
    if not diffs:
        return Decision(UNDETERMINED, None, None, None, 0, margin)
    mean = statistics.fmean(diffs)
    lo, hi = _interval(diffs, 0.95)
    lo90, hi90 = _interval(diffs, 0.90)
    if lo is None or hi is None or lo90 is None or hi90 is None:
        return Decision(UNDETERMINED, mean, None, None, len(diffs), margin)
    within = margin is not None and -margin < lo90 and hi90 < margin
    if lo > 0 or hi < 0:
        good = (lo > 0) == higher_is_better
        return Decision(BETTER if good else WORSE, mean, lo, hi, len(diffs), margin, within)
    if within:
        return Decision(EQUIVALENT, mean, lo, hi, len(diffs), margin, True)
    return Decision(UNDETERMINED, mean, lo, hi, len(diffs), margin)
