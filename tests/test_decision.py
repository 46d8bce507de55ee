"""Every paired comparison ends in a decision: better, worse, equivalent within the stated
margin (two one-sided t tests), or undetermined (fewer than 6 paired seeds, a shape the calibrated
t does not cover, or an exact sign-flip test that does not agree); and the report's published-findings
section checks each stated expectation with that decision."""

from __future__ import annotations

import pytest

from attnbench.report.decision import BETTER, EQUIVALENT, UNDETERMINED, WORSE, decide
from attnbench.report.expectations import verdict
from attnbench.stats.exact import min_seeds
from attnbench.stats.sequential import Design

FALL = [-0.50, -0.55, -0.60, -0.52, -0.58, -0.54]  # 6 paired seeds, every one lower, tight spread
TIGHT = [0.01, -0.01, 0.005, -0.005, 0.0, 0.008]  # centred on 0, far inside +-0.05


@pytest.mark.parametrize(
    "diffs, margin, higher, outcome",
    [
        (FALL, 0.05, True, WORSE),  # accuracy fell on every seed, tight spread
        (FALL, 0.05, False, BETTER),  # the same fall in loss is better
        (TIGHT, 0.05, False, EQUIVALENT),  # 90% interval inside +-0.05
        ([0.30, -0.30, 0.10, -0.10, 0.20, -0.25], 0.05, False, UNDETERMINED),  # spans zero and the margin
        (TIGHT, None, False, UNDETERMINED),  # no margin stated: equivalence cannot be shown
        ([0.02], 0.05, False, UNDETERMINED),  # one seed: no interval
        ([0.0] * 6, 0.05, True, EQUIVALENT),  # identical on every seed: a zero-width interval
        (FALL[:5], 0.05, False, UNDETERMINED),  # 5 seeds: the sign-flip test cannot reach 5% (least p 0.0625)
        (FALL[:3], 0.05, False, UNDETERMINED),  # 3 seeds: the same, however tight
        (TIGHT[:3], 0.05, False, UNDETERMINED),  # ... for equivalence too
    ],
)
def test_decisions_on_hand_made_differences(diffs, margin, higher, outcome):
    assert decide(diffs, margin, higher).outcome == outcome


def test_too_few_seeds_says_why_and_how_many_an_exact_test_needs():
    assert min_seeds(0.05) == 6
    d = decide(FALL[:3], 0.05, higher_is_better=False)  # clear on 3 seeds, but no exact test can reach 5%
    assert d.outcome == UNDETERMINED and d.why.startswith("3 paired seeds: an exact test needs 6 to reach 5%")
    assert d.text().endswith(f"n=3, exact p=0.25, undetermined ({d.why})")
    assert decide(FALL[:5], 0.05, higher_is_better=False).why.startswith("5 paired seeds: an exact test needs 6")
    six = decide(FALL, 0.05, higher_is_better=False)
    assert six.outcome == BETTER and six.why == "" and six.exact_p == pytest.approx(2 / 2**6)


def test_calibrated_critical_values_cover_skewness_two():
    # one look of n seeds: the largest boundary of the normal, gamma(4) and gamma(1) laws (skewness 0, 1, 2)
    two = {3: 8.215, 5: 4.699, 6: 4.150, 8: 3.523, 10: 3.190}
    for n, want in two.items():
        assert Design(n, n).t_crit(n, 0.05, "two") == pytest.approx(want, abs=1e-3)
    assert Design(3, 3).t_crit(3, 0.05, "one") == pytest.approx(7.987, abs=1e-3)  # Student's t: 2.920
    assert Design(6, 6).t_crit(6, 0.05, "one") == pytest.approx(4.137, abs=1e-3)  # Student's t: 2.015


def test_a_t_decision_needs_the_exact_test_to_agree():
    # 5 seeds up by ~0.1 and one slightly down: the calibrated t's 95% interval excludes 0, but one
    # sign of six against the rest gives a sign-flip p of 4 / 64 = 0.0625 > 0.05
    d = decide([0.10, 0.12, 0.11, 0.13, 0.09, -0.005], 0.05, higher_is_better=False)
    assert d.lo is not None and d.lo > 0
    assert d.outcome == UNDETERMINED and d.exact_p == pytest.approx(4 / 64)
    assert "the exact test does not confirm the t decision" in d.why


def test_two_groups_or_skew_beyond_the_calibration_decide_nothing():
    two_groups = decide([0.20, 0.21, 0.22, 0.40, 0.41, 0.42], 0.05, higher_is_better=False)
    assert two_groups.lo is not None and two_groups.lo > 0 and two_groups.exact_p == pytest.approx(2 / 64)
    assert two_groups.outcome == UNDETERMINED and "two groups (3 and 3 seeds" in two_groups.why
    skewed = decide([1.0, 1.01, 1.02, 1.03, 1.04, 1.6], 0.05, higher_is_better=False)
    assert skewed.lo is not None and skewed.lo > 0 and skewed.exact_p == pytest.approx(2 / 64)
    assert skewed.outcome == UNDETERMINED and "skewed beyond the calibrated range" in skewed.why


EDGE = [0.02, 0.04, 0.03, 0.025, 0.035, 0.03]  # mean 0.03, sd 0.00707, n 6


def test_equivalence_is_the_two_one_sided_tests_at_the_margin_edge():
    # the one-sided 95% bound, calibrated on normal and skewed differences, is 4.137 standard errors:
    # 0.03 + 4.137 * 0.002887 = 0.04194; and the 95% interval 0.03 +- 4.150 * 0.002887 =
    # [0.0180, 0.0420] excludes 0, with every seed's sign alike (exact p 2 / 64): also a detected difference
    d = decide(EDGE, 0.0420, higher_is_better=False)
    assert d.outcome == WORSE and d.within_margin  # upper bound 0.04194 < 0.0420
    assert not decide(EDGE, 0.0419, higher_is_better=False).within_margin
    assert "within ±0.042" in d.text() and "n=6, exact p=0.0312" in d.text()


def test_the_margin_edge_is_symmetric_and_the_text_can_use_fixed_decimals():
    mirror = [-x for x in EDGE]
    d = decide(mirror, 0.0420, higher_is_better=False)  # the mirror image: lower loss
    assert d.outcome == BETTER and d.within_margin  # lower bound -0.04194 > -0.0420
    assert not decide(mirror, 0.0419, higher_is_better=False).within_margin
    assert decide(mirror, 0.0420, higher_is_better=True).outcome == WORSE  # accuracy fell
    assert d.text(decimals=3).startswith("-0.030 [-0.042, -0.018], n=6, exact p=0.0312, better")


def test_a_detected_difference_inside_the_margin_says_both():
    d = decide([0.010, 0.011, 0.012, 0.0105, 0.0115, 0.0108], 0.05, higher_is_better=False)
    assert d.outcome == WORSE and d.within_margin
    assert d.text().endswith("worse (within ±0.05)")


@pytest.mark.parametrize(
    "expected, found, result",
    [
        ("worse", "worse", "agrees"),
        ("worse", "better", "disagrees"),
        ("worse", "equivalent", "disagrees"),
        ("equivalent", "equivalent", "agrees"),
        ("better", "undetermined", "undetermined"),
    ],
)
def test_expectation_verdicts(expected, found, result):
    assert verdict(expected, found) == result
