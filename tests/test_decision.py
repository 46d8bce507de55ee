"""Every paired comparison ends in a decision: better, worse, equivalent within the stated
margin (two one-sided t tests), or undetermined; and the report's published-findings
section checks each stated expectation with that decision."""

from __future__ import annotations

import pytest

from attnbench.report.decision import BETTER, EQUIVALENT, UNDETERMINED, WORSE, decide
from attnbench.report.expectations import verdict


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
        ([0.01, 0.02], 0.05, False, EQUIVALENT),  # n=2: 90% interval 0.015 +- 0.0316 inside +-0.05
        ([0.01, 0.02], 0.04, False, UNDETERMINED),  # ... but not inside +-0.04 (upper bound 0.0466)
        ([0.01, 0.02], None, False, UNDETERMINED),  # n=2, 95% interval 0.015 +- 0.0635 spans 0
    ],
)
def test_decisions_on_hand_made_differences(diffs, margin, higher, outcome):
    assert decide(diffs, margin, higher).outcome == outcome


def test_equivalence_is_the_two_one_sided_tests_at_the_margin_edge():
    # mean 0.03, sd 0.01, n 3: 90% half-width t(0.95, 2) * 0.01 / sqrt(3) = 2.920 * 0.00577 = 0.01686
    # (and the 95% interval 0.03 +- 0.0248 excludes 0, so it is also a detected difference)
    d = decide([0.02, 0.03, 0.04], 0.0469, higher_is_better=False)
    assert d.outcome == WORSE and d.within_margin  # upper 90% bound 0.04686 < 0.0469
    assert not decide([0.02, 0.03, 0.04], 0.0468, higher_is_better=False).within_margin
    assert "within ±0.0469" in d.text() and "n=3" in d.text()


def test_the_margin_edge_is_symmetric_and_the_text_can_use_fixed_decimals():
    d = decide([-0.02, -0.03, -0.04], 0.0469, higher_is_better=False)  # the mirror image: lower loss
    assert d.outcome == BETTER and d.within_margin  # lower 90% bound -0.04686 > -0.0469
    assert not decide([-0.02, -0.03, -0.04], 0.0468, higher_is_better=False).within_margin
    assert decide([-0.02, -0.03, -0.04], 0.0469, higher_is_better=True).outcome == WORSE  # accuracy fell
    assert d.text(decimals=3).startswith("-0.030 [-0.055, -0.005], n=3, better")


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
