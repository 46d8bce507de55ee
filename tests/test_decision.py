"""Every paired comparison ends in a decision: better, worse, equivalent within the stated
margin (two one-sided t tests), or undetermined; and the report's published-findings
section checks each stated expectation with that decision."""

from __future__ import annotations

import pytest

from attnbench.report.decision import BETTER, EQUIVALENT, UNDETERMINED, WORSE, decide
from attnbench.report.expectations import verdict
from attnbench.sequential import Design


@pytest.mark.parametrize(
    "diffs, margin, higher, outcome",
    [
        ([-0.50, -0.55, -0.60], 0.05, True, WORSE),  # accuracy fell on every seed, tight spread
        ([-0.50, -0.55, -0.60], 0.05, False, BETTER),  # the same fall in loss is better
        ([0.01, -0.01, 0.005], 0.05, False, EQUIVALENT),  # 90% interval inside +-0.05
        ([0.30, -0.30, 0.10], 0.05, False, UNDETERMINED),  # spans zero and the margin
        ([0.01, -0.01, 0.005], None, False, UNDETERMINED),  # no margin stated: equivalence cannot be shown
        ([0.02], 0.05, False, UNDETERMINED),  # one seed: no interval
        ([0.0, 0.0, 0.0], 0.05, True, EQUIVALENT),  # identical on every seed: a zero-width interval
        ([0.01, 0.02], 0.07, False, EQUIVALENT),  # n=2: one-sided bounds 0.015 +- 10.64 * 0.005 inside +-0.07
        ([0.01, 0.02], 0.06, False, UNDETERMINED),  # ... but not inside +-0.06 (upper bound 0.0682)
        ([0.01, 0.02], None, False, UNDETERMINED),  # n=2, 95% interval 0.015 +- 0.0635 spans 0
    ],
)
def test_decisions_on_hand_made_differences(diffs, margin, higher, outcome):
    assert decide(diffs, margin, higher).outcome == outcome


def test_equivalence_is_the_two_one_sided_tests_at_the_margin_edge():
    # mean 0.03, sd 0.01, n 3: the one-sided 95% bound, calibrated on normal and skewed differences,
    # is 4.497 standard errors (Student's t: 2.920): 0.03 + 4.497 * 0.00577 = 0.05596; and the 95%
    # interval 0.03 +- 5.111 * 0.00577 = [0.0005, 0.0595] excludes 0: also a detected difference
    assert Design(3, 3).t_crit(3, 0.05, "one") == pytest.approx(4.497, abs=1e-3)
    d = decide([0.02, 0.03, 0.04], 0.0560, higher_is_better=False)
    assert d.outcome == WORSE and d.within_margin  # upper bound 0.05596 < 0.0560
    assert not decide([0.02, 0.03, 0.04], 0.0559, higher_is_better=False).within_margin
    assert "within ±0.056" in d.text() and "n=3" in d.text()


def test_the_margin_edge_is_symmetric_and_the_text_can_use_fixed_decimals():
    d = decide([-0.02, -0.03, -0.04], 0.0560, higher_is_better=False)  # the mirror image: lower loss
    assert d.outcome == BETTER and d.within_margin  # lower bound -0.05596 > -0.0560
    assert not decide([-0.02, -0.03, -0.04], 0.0559, higher_is_better=False).within_margin
    assert decide([-0.02, -0.03, -0.04], 0.0560, higher_is_better=True).outcome == WORSE  # accuracy fell
    assert d.text(decimals=3).startswith("-0.030 [-0.060, -0.000], n=3, better")


def test_a_detected_difference_inside_the_margin_says_both():
    d = decide([0.010, 0.011, 0.012], 0.05, higher_is_better=False)
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
