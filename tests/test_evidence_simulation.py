"""Decisions that hold when the noise is not normal (issue 55): per-seed test values are drawn
under no true difference in means and driven through the seed planner (seeds until decided:
which rows get another seed), the learned gate and the report's decision, exactly as
`attnbench run` and `attnbench report` chain them; a variant is called better or worse (or, for
the TOST case, equivalent) in at most 5% of the comparisons (Clopper-Pearson 95% upper limit
<= 6%), under:

  normal noise; t(3) noise; a right-skewed variant (gamma, skewness 1); a bimodal variant that
  forms the circuit on a third of its seeds, at the same mean as a unimodal baseline; and TOST at
  exactly the margin under skewed noise (either direction).

Through the rules before issue 55 (Student-t intervals; learned when the t interval of the mean
clears the declared 1/K null; seeds added on the mean's side of it, no margin; no split-seed
rule), the same draws gave, at 3 fixed seeds / 3..6 seeds until decided: normal 4.9% / 4.5%,
t(3) 3.9% / 4.2%, skewed 5.3% / 6.8%, bimodal 32.1% / 33.0%, TOST at the margin skewed right
8.6% / 4.6% (left 2.3% / 1.1%)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from attnbench.plan.seed_rounds import Arm, still_open
from attnbench.report.decision import BETTER, EQUIVALENT, WORSE
from attnbench.report.floors import Floor
from attnbench.report.paired import compare_rows
from attnbench.stats.sequential import Design

# 1000 comparisons: a rule whose false rate is 6% passes (k <= 45, upper <= 0.06) with probability 0.02;
# the worst rate seen at 2000 was 1.45% (TOST at the margin, skewed right, fixed 3 seeds).
SIMS = 1000
NULL = 0.378  # the null level of the accuracy: quick's MQAR, the best binding-free predictor (mean of K = 2, 4, 6)
ANSWERS = 1536.0  # answers behind each seed's test accuracy
MARGIN = 0.05
FLOOR = Floor("null", NULL, True)
DESIGNS = {"fixed 3 seeds": Design(3, 3), "3..6 seeds until decided": Design(3, 6)}


def _upper(k: int, n: int) -> float:
    """The Clopper-Pearson 95% upper limit of a rate of k in n."""
    return 1.0 if k == n else float(stats.beta.ppf(0.975, k + 1, n - k))


def run(draw, design: Design, outcomes: tuple[str, ...]) -> tuple[int, int]:
    """(comparisons ending in one of ``outcomes``, SIMS; "within" counts a difference declared inside
    the margin, equivalent or "better/worse (within the margin)"): each comparison draws seeds 0..min-1
    for both rows, then one more seed while the planner keeps the row open, and ends in the
    report's decision on the seeds it has."""
    rng = np.random.default_rng(20_550)
    hits = 0
    for _ in range(SIMS):
        seeds = design.max
        mine, base = draw(rng, seeds)  # (seeds,) each: test accuracy per seed
        n = design.min
        while True:
            arms = [
                Arm(dict(enumerate(x[:n])), dict.fromkeys(range(n), NULL), dict.fromkeys(range(n), ANSWERS))
                for x in (mine, base)
            ]
            if n >= design.max or not still_open(arms[0], arms[1], design, "accuracy", MARGIN):
                break
            n += 1
        counts = ({s: ANSWERS for s in range(n)}, {s: ANSWERS for s in range(n)})
        seq = design if design.max > design.min else None
        found = compare_rows(arms[0].values, arms[1].values, FLOOR, True, MARGIN, seq, counts)
        hits += found.outcome in outcomes or ("within" in outcomes and found.within_margin)
    return hits, SIMS


def normal(rng, n):
    return rng.normal(0.8, 0.02, n), rng.normal(0.8, 0.02, n)


def t3(rng, n):
    return 0.8 + 0.01 * rng.standard_t(3, n), 0.8 + 0.01 * rng.standard_t(3, n)


def skewed(rng, n):
    """The variant sometimes far better than usual, never far worse (gamma(4): skewness 1)."""
    return 0.8 + 0.02 * (rng.standard_gamma(4.0, n) - 4.0) / 2.0, rng.normal(0.8, 0.002, n)


def bimodal(rng, n):
    """The variant forms the circuit on a third of its seeds (0.97) and sits on the shortcut's
    plateau, the null level, on the rest (binomial noise of its answers); the baseline learns every
    time, at the same mean."""
    formed = rng.random(n) < 1 / 3
    at_null = NULL + rng.normal(0.0, np.sqrt(NULL * (1 - NULL) / ANSWERS), n)
    mine = np.where(formed, rng.normal(0.97, 0.005, n), at_null)
    return mine, rng.normal(0.97 / 3 + 2 * NULL / 3, 0.01, n)


def at_margin(sign: float):
    def draw(rng, n):
        skew = sign * 0.02 * (rng.standard_gamma(4.0, n) - 4.0) / 2.0
        return 0.8 + MARGIN + skew, rng.normal(0.8, 0.002, n)

    return draw


@pytest.mark.parametrize("design", DESIGNS.values(), ids=DESIGNS.keys())
@pytest.mark.parametrize(
    "name, draw, outcomes",
    [
        ("normal", normal, (BETTER, WORSE)),
        ("t(3)", t3, (BETTER, WORSE)),
        ("right-skewed variant", skewed, (BETTER, WORSE)),
        ("bimodal variant", bimodal, (BETTER, WORSE)),
        ("TOST at the margin, skewed right", at_margin(1.0), (EQUIVALENT, "within")),
        ("TOST at the margin, skewed left", at_margin(-1.0), (EQUIVALENT, "within")),
    ],
)
def test_no_true_difference_is_decided_in_more_than_5_percent(name, draw, outcomes, design):
    k, n = run(draw, design, outcomes)
    print(f"\n{name}, {design.method()}: {k}/{n} = {k / n:.4f} (upper {_upper(k, n):.4f})")
    assert k / n <= 0.05 and _upper(k, n) <= 0.06


def test_a_bimodal_variant_reads_learned_on_k_of_n_and_is_decided_on_its_share():
    mine, base = {0: 0.97, 1: 0.33, 2: 0.34}, {0: 0.55, 1: 0.56, 2: 0.54}
    counts = (dict.fromkeys(mine, ANSWERS), dict.fromkeys(base, ANSWERS))
    found = compare_rows(mine, base, FLOOR, True, MARGIN, None, counts, ("future", "softmax"))
    assert found.text() == "learned on 1 of 3 seeds (softmax 3 of 3): share undetermined, Boschloo p=0.219"
    assert (found.mean, found.lo, found.hi) == (None, None, None)  # no interval over two populations
    two = compare_rows({0: 0.97, 1: 0.34}, {0: 0.55, 1: 0.56}, FLOOR, True, MARGIN, None, counts)
    assert two.text().endswith("cannot decide with 2 vs 2 seeds")  # no table of 2 vs 2 seeds reaches 5%
    more = {s: (0.97 if s < 2 else 0.335) for s in range(8)}, dict.fromkeys(range(8), 0.97)
    counts8 = (dict.fromkeys(range(8), ANSWERS), dict.fromkeys(range(8), ANSWERS))
    decided = compare_rows(*more, FLOOR, True, MARGIN, None, counts8, ("future", "softmax"))
    assert decided.text().startswith("learned on 2 of 8 seeds (softmax 8 of 8): learns on fewer seeds, Boschloo p=")


def test_the_planner_gives_a_split_row_seeds_until_its_share_is_decided():
    design = Design(3, 10)
    split = Arm({0: 0.97, 1: 0.34, 2: 0.33}, dict.fromkeys(range(3), NULL), dict.fromkeys(range(3), ANSWERS))
    learned = Arm(dict.fromkeys(range(3), 0.96), dict.fromkeys(range(3), NULL), dict.fromkeys(range(3), ANSWERS))
    never = Arm(dict.fromkeys(range(3), 0.33), dict.fromkeys(range(3), NULL), dict.fromkeys(range(3), ANSWERS))
    assert still_open(split, learned, design, "accuracy", MARGIN)  # 1 of 3 against 3 of 3: undecided
    assert not still_open(never, learned, design, "accuracy", MARGIN)  # learned on no seed: nothing to decide
    assert not still_open(split, learned, Design(3, 3), "accuracy", MARGIN)  # at max
    close3 = Arm({0: 0.961, 1: 0.9611, 2: 0.9609}, split.floors, split.answers)  # inside the margin, on 3 seeds
    assert still_open(close3, learned, design, "accuracy", MARGIN)  # too few seeds for an exact test: more seeds
    eight = range(8)  # at the look of 8 seeds the one-sided exact p (1 / 2^8) is within the look's share of 5%
    close = Arm(
        {s: 0.96 + 0.0001 * (s % 3 - 1) for s in eight}, dict.fromkeys(eight, NULL), dict.fromkeys(eight, ANSWERS)
    )
    learned8 = Arm(dict.fromkeys(eight, 0.96), close.floors, close.answers)
    assert not still_open(close, learned8, design, "accuracy", MARGIN)  # equivalent within the margin: decided
    assert still_open(close, learned8, design, "accuracy", None)  # without a margin nothing decides it (signs differ)
