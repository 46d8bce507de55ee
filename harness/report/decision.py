"""Every paired comparison ends in a decision: better, worse, equivalent within a stated margin
(two one-sided tests, TOST), or undetermined, by the one rule of attnbench.stats.paired (read by
the planner too): at least 6 paired seeds (an exact test can reach 5%), differences of a shape the
calibrated t covers (no two groups, no skew beyond 2), the calibrated paired t, and the exact
sign-flip test agreeing. On the per-seed differences d = variant - baseline (n seeds):
  better / worse   the 95% interval of mean(d) excludes 0 (direction by the metric's sense), and
                   the sign-flip p is at most 5%;
  equivalent       both one-sided 95% bounds lie inside (-margin, +margin), and both one-sided
                   exact tests of the margin agree (Schuirmann 1987);
  undetermined     neither, or the seeds, the shape or the exact test stop it (the reason is kept).
A difference that is both detected and inside the margin is reported as the difference
(better / worse) with "within the margin" added."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attnbench.decision_words import (
    BASELINE,
    BETTER,
    EQUIVALENT,
    EQUIVALENT_WITHIN,
    NO_PAIRED_SEEDS,
    UNDETERMINED,
    WITHIN_MARGIN,
    WORSE,
)
from attnbench.report.load import StoreData
from attnbench.stats import sequential as seq
from attnbench.stats.exact import EXACT_TEXT
from attnbench.stats.paired import decide_paired

__all__ = ["BETTER", "EQUIVALENT", "TEST_TEXT", "UNDETERMINED", "WORSE", "Decision", "decide", "method_text"]
TEST_TEXT = (
    "at least 6 paired seeds; paired t on per-seed differences with critical values calibrated on normal and "
    "skewed differences (95% interval for a difference; equivalence: two one-sided tests at 5%, each bound "
    f"inside ±margin), confirmed by the {EXACT_TEXT}; " + seq.ASSUMPTION_TEXT
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
    exact_p: float | None = None  # the sign-flip p (two-sided; equivalence: the larger one-sided p)
    why: str = ""  # why a row with an interval is undetermined (too few seeds, shape, exact test)

    def text(self, unit: str = "", decimals: int | None = None) -> str:
        """e.g. "-0.56 [-0.61, -0.51], n=3, worse" or "+0.02 [-0.01, +0.05], n=3, equivalent within ±0.05"
        (3 significant digits, or ``decimals`` fixed ones)."""
        if self.outcome == BASELINE:  # the baseline's own row
            return BASELINE
        if self.mean is None:
            return NO_PAIRED_SEEDS
        fmt = "+.3g" if decimals is None else f"+.{decimals}f"
        head = f"{self.mean:{fmt}}{unit}"
        if self.lo is not None and self.hi is not None:
            head += f" [{self.lo:{fmt}}, {self.hi:{fmt}}]"
        exact = "" if self.exact_p is None else f", exact p={self.exact_p:.3g}"
        why = f" ({self.why})" if self.why and self.outcome == UNDETERMINED else ""
        return f"{head}, n={self.n}{exact}, {self.word()}{why}"

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
    o = decide_paired(diffs, margin, higher_is_better, design)
    return Decision(
        _OUTCOME.get(o.code, UNDETERMINED), o.mean, o.lo, o.hi, o.n, margin, o.within_margin, o.exact_p, o.reason
    )


def method_text(data: StoreData, fixed: str) -> str:
    """``fixed`` (the fixed-seed test), with the sequential design of each experiment that
    adds seeds until decided."""
    designs: dict[str, list[str]] = {}
    for exp, summary in zip(data.runs["experiment"], data.runs["summary"], strict=True):
        design = seq.design_of(summary.get("protocol") or {}) if isinstance(summary, dict) else None
        if design is not None:
            designs.setdefault(design.method(), [])
            if exp not in designs[design.method()]:
                designs[design.method()].append(exp)
    if not designs:
        return fixed
    per_design = "; ".join(f"{', '.join(exps)}: {m}" for m, exps in designs.items())
    return (
        f"{fixed}. Seeds until decided ({per_design}): a row undetermined after a round gets another seed, and its "
        "decision reads the 95% repeated confidence interval (90% for equivalence), valid under that stopping"
    )
