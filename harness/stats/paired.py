"""The paired decision on per-seed differences d = variant - baseline: one rule, read by the planner
(which rows get more seeds, which get replicated) and by the report (what it prints).

A row is decided only where all of these hold:
  seeds    at least min_seeds(alpha) pairs (6 at 5%): below that no distribution-free test can
           reach the level, so no decision rests on an assumed law alone;
  shape    the differences show neither two groups nor skew beyond the calibrated range
           (attnbench.stats.shape); else no decision, with the reason;
  t        the calibrated paired t (attnbench.stats.sequential: critical values that hold for normal and
           skewed differences up to skewness 2, repeated intervals under seeds-until-decided):
           better / worse where the 95% interval excludes 0, equivalent where both one-sided
           bounds lie inside (-margin, +margin);
  exact    the sign-flip test agrees at the look's level (two-sided for better / worse; for
           equivalence both one-sided tests of the shifted differences d -/+ margin).
The exact p is reported with every decision."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from attnbench.stats import sequential as seq
from attnbench.stats.exact import min_seeds, sign_flip_p
from attnbench.stats.shape import Shape, check_shape

UNDETERMINED, BETTER, WORSE, EQUIVALENT = seq.UNDETERMINED, seq.BETTER, seq.WORSE, seq.EQUIVALENT


@dataclass(frozen=True)
class PairedOutcome:
    """The rule's outcome code with what it read: the mean and its 95% interval (None where no look
    of the design applies), the exact p (two-sided; for equivalence the larger one-sided p), the
    shape checks, and the reason a row with an interval was left undetermined."""

    code: int
    mean: float | None
    lo: float | None
    hi: float | None
    n: int
    exact_p: float | None = None
    shape: Shape | None = None
    reason: str = ""
    within_margin: bool = False


def too_few_text(n: int, alpha: float) -> str:
    return (
        f"{n} paired seeds: an exact test needs {min_seeds(alpha)} to reach {alpha:.0%} "
        "(no decision rests on an assumed law alone)"
    )


def decide_paired(
    diffs: Sequence[float], margin: float | None, higher_is_better: bool, design: seq.Design | None = None
) -> PairedOutcome:
    """The decision on ``diffs`` at the look of len(diffs) seeds of ``design`` (None: fixed seeds)."""
    d = [float(x) for x in diffs if x is not None and math.isfinite(x)]
    n = len(d)
    if n == 0:
        return PairedOutcome(UNDETERMINED, None, None, None, 0)
    mean = statistics.fmean(d)
    design = design or seq.Design(n, n)
    if n < max(2, design.min) or n > design.max:  # no look of the design at this n
        return PairedOutcome(UNDETERMINED, mean, None, None, n)
    sd = statistics.stdev(d)
    code_, lo_, hi_ = seq.decide_arrays(mean, sd, n, design, margin, higher_is_better)
    code, lo, hi = int(code_), float(lo_), float(hi_)
    within = False
    if margin is not None:
        half = design.t_crit(n, design.alpha, "one") * sd / math.sqrt(n)
        within = -margin < mean - half and mean + half < margin
    level = design.look_alpha(n)  # the error this look may spend (alpha for fixed seeds)
    if code == EQUIVALENT and margin is not None:  # both one-sided exact tests of the margin
        p = max(sign_flip_p(d, "greater", -margin), sign_flip_p(d, "less", margin))
    else:
        p = sign_flip_p(d)
    shape = check_shape(d)
    reason = ""
    if n < min_seeds(design.alpha):
        reason = too_few_text(n, design.alpha)
    elif not shape.valid:
        reason = shape.reason()
    elif code != UNDETERMINED and p > level:
        reason = f"the exact test does not confirm the t decision (sign-flip p {p:.3f} > {level:.3g})"
    if reason:
        return PairedOutcome(UNDETERMINED, mean, lo, hi, n, p, shape, reason, within)
    return PairedOutcome(code, mean, lo, hi, n, p, shape, "", within)
