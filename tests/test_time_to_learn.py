"""Time to learn: Kaplan-Meier medians with Brookmeyer-Crowley intervals and the log-rank test
against hand-computed cases, and the report's table and first-screen clause from a hand-made
store in which the baseline never reaches the target (censored, not dropped)."""

from __future__ import annotations

import math

import pytest

from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.stats.survival import kaplan_meier, log_rank, median_time
from tests.report_store import time_to_learn_store

SUITE = "ttl"
REACHED = {"linear": (600, 800, 1000), "softmax": (None, None, None)}  # step of first val accuracy >= 0.9
TEST_ACC = {"linear": (0.95, 0.60, 0.91), "softmax": (0.40, 0.85, 0.55)}  # final: undetermined at 3 seeds


def test_kaplan_meier_and_greenwood_match_a_hand_computed_case():
    at, surv, se = kaplan_meier([1, 2, 3], [True, True, True])
    assert list(at) == [1, 2, 3] and surv == pytest.approx([2 / 3, 1 / 3, 0])
    # Greenwood: (2/3)^2 * 1/(3*2) and (1/3)^2 * (1/6 + 1/(2*1)), both 2/27
    assert se == pytest.approx([math.sqrt(2 / 27), math.sqrt(2 / 27), 0])
    _, surv, _ = kaplan_meier([1, 2, 3, 4], [True, False, True, False])  # 3/4, then 3/4 * 1/2
    assert surv == pytest.approx([0.75, 0.375])


def test_median_with_brookmeyer_crowley_interval_and_censoring():
    m = median_time([1, 2, 3], [True, True, True])
    # S_lo(1) = 2/3 - 1.96 sqrt(2/27) = 0.13 <= 0.5; S_hi first <= 0.5 at t=3 (S = 0)
    assert (m.median, m.lo, m.hi, m.events, m.n) == (2, 1, 3, 3, 3)
    m = median_time([1, 2, 3, 4], [True, False, True, False])
    assert (m.median, m.lo, m.hi) == (3, 1, None)  # the upper limit is not reached
    m = median_time([3000, 3000, 3000], [False, False, False])
    assert (m.median, m.lo, m.hi, m.events) == (None, None, None, 0)


def test_log_rank_matches_a_hand_computed_case():
    # a reaches at 1 and 2, b is censored at 3 twice:
    # t=1: E=2/4, V=1*2*2*3/(16*3)=1/4; t=2: E=1/3, V=1*1*2*2/(9*2)=2/9; (2 - 5/6)^2 / (17/36)
    lr = log_rank([1, 2], [True, True], [3, 3], [False, False])
    assert lr is not None and lr.chi2 == pytest.approx((7 / 6) ** 2 / (17 / 36)) and lr.faster
    # the p is exact over the C(4, 2) = 6 re-assignments (chi^2(1) would say 0.0896): 2 are as extreme
    assert lr.p == pytest.approx(2 / 6) and lr.exact and lr.permutations == 6
    assert log_rank([3], [False], [3], [False]) is None  # neither reached it


def _store(path):
    return time_to_learn_store(path, SUITE, REACHED, TEST_ACC)


def test_the_report_shows_time_to_learn_with_censoring_and_says_it_on_the_first_screen(tmp_path):
    report = build_report(load_store(_store(tmp_path / "s.sqlite"), SUITE))
    section = next(s for s in report.sections if s.title == "Time to learn")
    assert "Kaplan-Meier" in section.intro and "Brookmeyer-Crowley" in section.intro and "log-rank" in section.intro
    view = section.tables[0].view.set_index("variant")
    assert view.loc["softmax", "steps [95%]"] == "did not reach 0.9 accuracy in 3000 steps"
    assert view.loc["linear", "steps [95%]"] == "800 [600, 1000]"
    assert view.loc["linear", "reached (others censored)"] == "3 of 3 seeds"
    assert view.loc["softmax", "reached (others censored)"] == "0 of 3 seeds"
    # hand: t=600 E=1/2 V=1/4; t=800 E=2/5 V=6/25; t=1000 E=1/4 V=3/16 -> (3 - 1.15)^2 / 0.6775
    data = section.tables[0].data.set_index("variant")
    assert data.loc["linear", "logrank_chi2"] == pytest.approx(1.85**2 / 0.6775)
    # chi^2(1) would read p = 0.025 here; the exact permutation p is 2/20 = 0.1, the smallest 3 vs 3 allows
    assert data.loc["linear", "logrank_p"] == pytest.approx(0.1) and data.loc["linear", "logrank_min_p"] == 0.1
    assert str(view.loc["linear", "log-rank vs baseline"]).startswith("cannot decide with 3 vs 3 seeds")
    assert "p=" not in str(view.loc["linear", "log-rank vs baseline"])
    assert report.headline is not None
    clause = next(n for n in report.headline.notes if "time to 0.9 accuracy" in n)
    assert "linear reaches it in 800 steps [600, 1000] (3 of 3 seeds reached it" in clause
    assert "cannot decide with 3 vs 3 seeds" in clause and "p=" not in clause
    assert "softmax did not reach 0.9 accuracy in 3000 steps (0 of 3 seeds reached it)" in clause
