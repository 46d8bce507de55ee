"""How often a decision rule calls "better" or "worse" where there is no difference, under the
shapes of per-seed differences measured on quick's text (issue 70), for the rule before issue 70
(paired t with critical values calibrated on normal and skewness-1 laws, 5 seeds, no exact test,
no shape check) and the rule now (attnbench.stats.paired at 6 seeds: t calibrated to skewness 2,
shape checks, the exact sign-flip test confirming). Each rate comes with its Clopper-Pearson 95%
upper limit; the target is <= 5% (upper <= 6%).

Scenarios (test loss per seed, nats):
  bimodal-vs-unimodal   baseline 2.10 + 0.3 on 40% of seeds (seed sd 0.03), variant unimodal at its mean
  bimodal-both          both rows bimodal like that baseline, independently
  skew+2, skew-2        differences 0.05 (gamma(1) - 1), skewness +-2, mean 0
  normal                differences N(0, 0.05)

    python benchmarks/bench_decision_validity.py --sims 10000
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats

from attnbench.stats import sequential as seq
from attnbench.stats.paired import BETTER, WORSE, decide_paired

SLOW, SHARE, SD = 0.3, 0.4, 0.03


def old_t_crit(n: int) -> float:
    """The fixed-seed critical |t| before issue 70: the larger of the normal and gamma(4) laws' boundaries."""
    alpha = 0.05 - 4.0 * math.sqrt(0.05 * 0.95 / seq.CALIBRATION_PATHS)
    return max(seq._law_bounds(law, (n,), alpha, "obrien_fleming", "two")[0] for law in ("normal", "gamma4"))


def old_rule(d: np.ndarray, crit: float) -> bool:
    """Whether the old rule decides better or worse on differences ``d``."""
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    return abs(t) > crit


def new_rule(d: np.ndarray) -> bool:
    return decide_paired(d.tolist(), 0.05, False).code in (BETTER, WORSE)


def draw(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) per-seed differences variant - baseline under no difference."""

    def slow(k: int) -> np.ndarray:
        return rng.normal(0.0, SD, k) + SLOW * (rng.random(k) < SHARE)

    if name == "bimodal-vs-unimodal":
        return SLOW * SHARE + rng.normal(0.0, SD, n) - slow(n)
    if name == "bimodal-both":
        return slow(n) - slow(n)
    if name == "skew+2":
        return 0.05 * (rng.standard_gamma(1.0, n) - 1.0)
    if name == "skew-2":
        return -0.05 * (rng.standard_gamma(1.0, n) - 1.0)
    return rng.normal(0.0, 0.05, n)


def replication_rates(name: str, effect: float, sims: int) -> tuple[int, int, int, int]:
    """(decided, repeated, undetermined on fresh seeds, reversed): decide on 6 seeds, then the same
    rule on 6 fresh seeds of the same laws, ``effect`` added to the variant's differences."""
    rng = np.random.default_rng(70_071)
    decided = repeated = undetermined = reversed_ = 0
    for _ in range(sims):
        first = decide_paired((draw(name, rng, 6) + effect).tolist(), 0.05, False).code
        if first not in (BETTER, WORSE):
            continue
        fresh = decide_paired((draw(name, rng, 6) + effect).tolist(), 0.05, False).code
        decided += 1
        repeated += fresh == first
        reversed_ += fresh in (BETTER, WORSE) and fresh != first
        undetermined += fresh not in (BETTER, WORSE)
    return decided, repeated, undetermined, reversed_


def upper(k: int, n: int) -> float:
    return 1.0 if k == n else float(stats.beta.ppf(0.975, k + 1, n - k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sims", type=int, default=10000, help="comparisons per scenario and rule")
    args = parser.parse_args()
    crit5 = old_t_crit(5)
    new_crit = seq.Design(6, 6).t_crit(6)
    print(f"old rule: critical |t| {crit5:.2f} at 5 seeds; new rule: 6 seeds (t {new_crit:.2f} + exact + shape)")
    print(f"{'scenario':22s} {'old, 5 seeds':>22s} {'new, 6 seeds':>22s}")
    for name in ("bimodal-vs-unimodal", "bimodal-both", "skew+2", "skew-2", "normal"):
        rng = np.random.default_rng(70_070)
        old = sum(old_rule(draw(name, rng, 5), crit5) for _ in range(args.sims))
        new = sum(new_rule(draw(name, rng, 6)) for _ in range(args.sims))
        cells = [f"{k / args.sims:6.1%} (upper {upper(k, args.sims):5.1%})" for k in (old, new)]
        print(f"{name:22s} {cells[0]:>22s} {cells[1]:>22s}")
    print("\nthe rule now, decided on 6 seeds and decided again on 6 fresh ones (among the decided rows):")
    for name, effect in (
        ("bimodal-vs-unimodal", 0.0),
        ("skew+2", 0.0),
        ("bimodal-vs-unimodal", 0.05),
        ("normal", 0.05),
    ):
        n, rep, und, rev = replication_rates(name, effect, args.sims)
        share = f"repeated {rep / max(n, 1):.1%}, undetermined {und / max(n, 1):.1%}, reversed {rev / max(n, 1):.1%}"
        print(f"{name:22s} effect {effect:+.2f}: {n} decided; {share} (reversed upper {upper(rev, max(n, 1)):.1%})")


if __name__ == "__main__":
    main()
