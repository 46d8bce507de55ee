"""Each routine of attnbench.stats against scipy on the same data: survival curves and the
log-rank statistic, the exact tests, slopes and power laws, the learned gate, the t quantiles and
calibrated boundaries, the interval helpers, the scaling comparison's crossings and the report's
mean interval. Each test fails if its routine computed something else than it says."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from attnbench.report.values import mean_ci
from attnbench.stats import sequential
from attnbench.stats.exact import least_p, sign_flip_p, spearman_permutation_p
from attnbench.stats.intervals import interval, satterthwaite, seed_mean_draws, t_quantile_975, widened
from attnbench.stats.learned import seed_learned, share_test
from attnbench.stats.power_laws import PURE, SATURATING, fit_laws, fit_power_law, fit_scaling, law_values
from attnbench.stats.scaling_comparison import band, curves_cross
from attnbench.stats.shape import check_shape
from attnbench.stats.slopes import crossover, loglog_slope
from attnbench.stats.survival import Z975, kaplan_meier, log_rank, median_time

# time to target per seed (ties and censoring both present); False: censored at that time
TIMES = [30.0, 40.0, 40.0, 55.0, 60.0, 70.0, 80.0, 90.0, 100.0, 100.0, 100.0, 120.0]
EVENTS = [True, True, True, False, True, True, False, True, True, False, True, False]
TIMES_B = [20.0, 25.0, 30.0, 30.0, 45.0, 50.0, 60.0, 65.0, 100.0, 100.0]
EVENTS_B = [True, True, True, True, True, False, True, True, False, False]
SIZES = np.geomspace(6.6e3, 1.0e5, 6)


def _censored(times: list[float], events: list[bool]) -> stats.CensoredData:
    t, e = np.asarray(times), np.asarray(events)
    return stats.CensoredData(uncensored=t[e], right=t[~e])


def test_kaplan_meier_and_greenwood_are_scipys_ecdf_and_its_linear_interval():
    at, surv, se = kaplan_meier(TIMES, EVENTS)
    sf = stats.ecdf(_censored(TIMES, EVENTS)).sf
    np.testing.assert_allclose(surv, sf.evaluate(at), rtol=1e-12)
    ci = sf.confidence_interval(0.95, method="linear")  # S +- z * Greenwood se, clipped to [0, 1]
    inside = (surv - Z975 * se > 0) & (surv + Z975 * se < 1)
    assert inside.sum() >= 4
    np.testing.assert_allclose((surv - Z975 * se)[inside], ci.low.evaluate(at)[inside], rtol=1e-9)
    np.testing.assert_allclose((surv + Z975 * se)[inside], ci.high.evaluate(at)[inside], rtol=1e-9)


def test_the_median_and_its_brookmeyer_crowley_limits_are_where_scipys_curves_reach_one_half():
    m = median_time(TIMES, EVENTS)
    sf = stats.ecdf(_censored(TIMES, EVENTS)).sf
    ci = sf.confidence_interval(0.95, method="linear")
    at = np.unique(np.asarray(TIMES)[np.asarray(EVENTS)])

    def first(curve: np.ndarray) -> float | None:
        hit = np.nonzero(curve <= 0.5 + 1e-12)[0]
        return float(at[hit[0]]) if len(hit) else None

    assert m.median == first(sf.evaluate(at)) == 90.0
    assert (m.lo, m.hi) == (first(ci.low.evaluate(at)), first(ci.high.evaluate(at)))
    assert m.lo is not None and m.median is not None and m.lo < m.median and (m.hi is None or m.hi > m.median)
    assert (m.events, m.n) == (sum(EVENTS), len(EVENTS))


def test_the_log_rank_statistic_is_scipys_z_squared_and_its_chi2_p_scipys():
    lr = log_rank(TIMES, EVENTS, TIMES_B, EVENTS_B)
    assert lr is not None
    ref = stats.logrank(_censored(TIMES, EVENTS), _censored(TIMES_B, EVENTS_B))
    assert lr.chi2 == pytest.approx(float(ref.statistic) ** 2, rel=1e-9)
    assert float(stats.chi2.sf(lr.chi2, 1)) == pytest.approx(float(ref.pvalue), rel=1e-9)
    assert lr.observed == sum(EVENTS) and lr.faster == (float(ref.statistic) > 0)  # z = (O_1 - E_1) / sqrt(V)


@pytest.mark.parametrize("seed", range(4))
def test_the_sign_flip_p_is_scipys_exact_permutation_test(seed):
    rng = np.random.default_rng(seed)
    d = np.round(rng.normal(0.3, 1.0, 5 + seed), 1)  # rounded: tied sums occur
    flips = {"permutation_type": "samples", "n_resamples": np.inf}

    def total(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return x.sum(axis=axis)

    for alternative in ("two-sided", "greater", "less"):
        ref = stats.permutation_test((d,), total, alternative=alternative, **flips)
        assert sign_flip_p(d, alternative) == pytest.approx(float(ref.pvalue), rel=1e-12)
    shifted = stats.permutation_test((d + 0.2,), total, alternative="greater", **flips)
    assert sign_flip_p(d, "greater", shift=-0.2) == pytest.approx(float(shifted.pvalue), rel=1e-12)
    same_sign = stats.permutation_test((np.abs(d) + 0.1,), total, **flips)
    assert least_p(len(d)) == pytest.approx(float(same_sign.pvalue), rel=1e-12)


@pytest.mark.parametrize("n", [5, 6])
def test_spearmans_permutation_p_is_scipys_on_every_ordering(n):
    rng = np.random.default_rng(n)
    x, y = rng.normal(size=n), rng.normal(size=n)
    y = y + 0.8 * x  # some association

    def abs_rho(b: np.ndarray) -> float:  # one sample under "pairings": every ordering of y against x
        return abs(float(stats.spearmanr(x, b).statistic))  # pyright: ignore[reportAttributeAccessIssue]

    ref = stats.permutation_test(
        (y,),
        abs_rho,
        permutation_type="pairings",
        alternative="greater",
        n_resamples=math.factorial(n),
        vectorized=False,
    )
    assert ref.null_distribution.size == math.factorial(n)
    assert spearman_permutation_p(x, y) == pytest.approx(float(ref.pvalue), rel=1e-9)


def test_the_log_log_slope_is_linregress_on_the_logs():
    rng = np.random.default_rng(3)
    Ts = [256, 512, 1024, 2048, 4096, 8192]
    ys = [1e-4 * T**1.7 * math.exp(0.05 * rng.standard_normal()) for T in Ts]
    fit = loglog_slope(Ts, ys)
    ref = stats.linregress(np.log(Ts), np.log(ys))
    assert fit is not None and fit.ci95 is not None and fit.stderr is not None
    assert fit.slope == pytest.approx(ref.slope, rel=1e-12)  # pyright: ignore[reportAttributeAccessIssue]
    assert fit.intercept == pytest.approx(ref.intercept, rel=1e-12)  # pyright: ignore[reportAttributeAccessIssue]
    assert fit.stderr == pytest.approx(ref.stderr, rel=1e-12)  # pyright: ignore[reportAttributeAccessIssue]
    half = float(stats.t.ppf(0.975, len(Ts) - 2)) * ref.stderr  # pyright: ignore[reportAttributeAccessIssue]
    assert fit.ci95[1] - fit.slope == pytest.approx(half, rel=1e-3)


def test_the_crossover_length_is_where_the_two_power_laws_meet():
    Ts = [256, 512, 1024, 2048, 4096]
    variant = {T: 4e-3 * T**1.0 for T in Ts}  # linear in T
    baseline = {T: 2e-6 * T**2.0 for T in Ts}  # quadratic: slower from T = 2000 on
    c = crossover(variant, baseline)
    root = optimize.brentq(lambda T: 4e-3 * T - 2e-6 * T**2, 1024, 4096)
    assert c.status == "found" and c.T == 2048
    assert c.T_interp == pytest.approx(root, rel=1e-9)  # exact: the curves are straight in log-log


def test_the_97_5_percent_t_quantile_is_scipys():
    for dof in range(1, 400):
        assert t_quantile_975(dof) == pytest.approx(float(stats.t.ppf(0.975, dof)), abs=6e-4)


def test_the_calibrated_boundary_is_students_t_where_the_normal_law_applies(monkeypatch):
    monkeypatch.setattr(sequential, "CALIBRATION_LAWS", ("normal",))
    sequential.t_bounds.cache_clear()
    try:
        alpha = 0.05 - 4.0 * math.sqrt(0.05 * 0.95 / sequential.CALIBRATION_PATHS)  # the margin it keeps
        for n in (3, 6, 10):
            assert sequential.Design(n, n).t_crit(n) == pytest.approx(float(stats.t.isf(alpha / 2, n - 1)), rel=1e-12)
            one_sided = sequential.Design(n, n).t_crit(n, sides="one")
            assert one_sided == pytest.approx(float(stats.t.isf(alpha, n - 1)), rel=1e-12)
    finally:
        monkeypatch.undo()  # every law again, before anything else reads (and caches) a boundary
        sequential.t_bounds.cache_clear()
    at_every_law = sequential.Design(6, 6).t_crit(6)  # normal and skewed laws: never below Student's t
    assert at_every_law > float(stats.t.isf(0.025, 5))


def test_the_power_laws_are_scipys_curve_fit():
    rng = np.random.default_rng(5)
    y = 73.0 * SIZES**-0.5 + 1.4 + 0.01 * rng.standard_normal(len(SIZES))
    w = np.array([3.0, 2.0, 3.0, 1.0, 2.0, 3.0])  # seeds per size
    sigma = 1.0 / np.sqrt(w)  # curve_fit minimises sum(((y - f) / sigma)^2) = sum(w (y - f)^2)

    def saturating(x: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
        return a * x**-b + c

    def pure(x: np.ndarray, a: float, b: float) -> np.ndarray:
        return a * x**-b

    for law, f, p0 in ((SATURATING, saturating, (70.0, 0.5, 1.3)), (PURE, pure, (5.0, 0.1))):
        a, b, c, sse = fit_laws(SIZES, [y], law, w)[0]
        ref, _ = optimize.curve_fit(f, SIZES, y, p0=p0, sigma=sigma, maxfev=20_000)
        ref_sse = float((w * (y - f(SIZES, *ref)) ** 2).sum())
        assert sse == pytest.approx(ref_sse, rel=1e-6)
        np.testing.assert_allclose([a, b, c][: len(ref)], ref, rtol=1e-3)
    one = fit_power_law(list(SIZES), list(y))
    ref, _ = optimize.curve_fit(saturating, SIZES, y, p0=(70.0, 0.5, 1.3), maxfev=20_000)
    np.testing.assert_allclose([one.a, one.b, one.c], ref, rtol=1e-3)


def test_the_irreducible_and_lack_of_fit_f_tests_are_scipys_on_curve_fits():
    rng = np.random.default_rng(7)
    groups = [73.0 * n**-0.5 + 1.4 + 0.01 * rng.standard_normal(3) for n in SIZES]
    fit = fit_scaling(SIZES, groups, draws=50)
    means, m = np.array([g.mean() for g in groups]), np.full(len(SIZES), 3.0)
    sat, _ = optimize.curve_fit(lambda x, a, b, c: a * x**-b + c, SIZES, means, p0=(70, 0.5, 1.3), sigma=m**-0.5)
    pure, _ = optimize.curve_fit(lambda x, a, b: a * x**-b, SIZES, means, p0=(5, 0.1), sigma=m**-0.5, maxfev=9999)
    sse_sat = float((m * (means - (sat[0] * SIZES ** -sat[1] + sat[2])) ** 2).sum())
    sse_pure = float((m * (means - pure[0] * SIZES ** -pure[1]) ** 2).sum())
    k = len(SIZES)
    f_p = float(stats.f.sf((sse_pure - sse_sat) / (sse_sat / (k - 3)), 1, k - 3))
    assert fit.f_p == pytest.approx(f_p, rel=1e-3) and fit.law == (SATURATING if f_p < 0.05 else PURE)
    ss_pe = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
    sse_law, lof_dof = (sse_sat, k - 3) if fit.law == SATURATING else (sse_pure, k - 2)
    lof_f = (sse_law / lof_dof) / (ss_pe / (2 * k))
    assert fit.lof_f == pytest.approx(lof_f, rel=1e-3)
    assert fit.lof_p == pytest.approx(float(stats.f.sf(lof_f, lof_dof, 2 * k)), rel=1e-3)


def test_a_seed_learned_exactly_when_the_one_sided_binomial_test_rejects_at_2_5_percent():
    for n in (10, 40, 200):
        for floor in (0.1, 0.25, 0.5, 0.9):
            for correct in range(n + 1):
                p = float(stats.binomtest(correct, n, floor, alternative="greater").pvalue)
                assert seed_learned(correct / n, floor, True, answers=n) == (p <= 0.025), (n, floor, correct)


@pytest.mark.parametrize(("n1", "n2"), [(3, 3), (4, 5)])
def test_the_share_test_is_boschloos_and_its_least_p_the_least_over_every_outcome(n1, n2):
    every = {
        (k1, k2): float(stats.boschloo_exact([[k1, k2], [n1 - k1, n2 - k2]]).pvalue)
        for k1 in range(n1 + 1)
        for k2 in range(n2 + 1)
    }
    least = min(every.values())
    for (k1, k2), p in every.items():
        t = share_test(k1, n1, k2, n2)
        assert t.least_p == pytest.approx(least, rel=1e-9)
        if least > 0.05:
            assert t.p is None
        elif k1 * n2 != k2 * n1:
            assert t.p == pytest.approx(p, rel=1e-9)


def test_welch_satterthwaite_dof_is_scipys_welch_t_test():
    rng = np.random.default_rng(11)
    a, b = rng.normal(0, 1, 4), rng.normal(0, 3, 7)
    terms = [(np.array([a.var(ddof=1) / len(a)]), np.array([len(a) - 1.0])),
             (np.array([b.var(ddof=1) / len(b)]), np.array([len(b) - 1.0]))]  # fmt: skip
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert satterthwaite(terms) == pytest.approx(float(ref.df), rel=1e-12)  # pyright: ignore[reportAttributeAccessIssue]


def test_the_widened_interval_is_the_percentile_one_stretched_by_t_over_z():
    draws = np.random.default_rng(13).gamma(3.0, 1.0, 4000)
    lo, hi = interval(draws)
    assert (lo, hi) == pytest.approx((stats.scoreatpercentile(draws, 2.5), stats.scoreatpercentile(draws, 97.5)))
    mid, f = float(np.median(draws)), float(stats.t.ppf(0.975, 4) / stats.norm.ppf(0.975))
    assert widened(draws, 4.0) == pytest.approx((mid - f * (mid - lo), mid + f * (hi - mid)), rel=1e-12)
    assert widened(draws, math.inf) == pytest.approx((lo, hi), rel=1e-12)


def test_seed_mean_draws_have_each_sizes_mean_and_the_variance_of_its_mean():
    groups = [[2.0, 2.3, 1.9], [1.5, 1.7], [1.2, 1.25, 1.1, 1.3]]
    d = seed_mean_draws(groups, 200_000, seed=0)
    for i, g in enumerate(groups):
        assert d[:, i].mean() == pytest.approx(np.mean(g), abs=4 * stats.sem(g) / math.sqrt(len(d)))
        assert d[:, i].var() == pytest.approx(float(stats.sem(g)) ** 2, rel=0.03)  # s^2 / m, not (m-1)/m of it


def test_the_sample_skewness_is_scipys_adjusted_fisher_pearson():
    d = np.random.default_rng(17).gamma(1.0, 1.0, 9)
    assert check_shape(d.tolist()).skewness == pytest.approx(float(stats.skew(d, bias=False)), rel=1e-12)


def test_the_mean_interval_is_scipys_student_t_interval():
    values = [2.11, 2.08, 2.15, 2.09, 2.13]
    m = mean_ci(values)
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert m.mean == pytest.approx(np.mean(values)) and m.n == len(values)
    assert (m.lo, m.hi) == pytest.approx((lo, hi), rel=1e-5)


def test_fitted_curves_cross_where_brentq_finds_the_root():
    p = np.array([[73.0, 0.5, 1.4], [60.0, 0.45, 1.5]])  # (R, 3) a, b, c
    q = np.array([[40.0, 0.4, 1.42], [10.0, 0.2, 1.0]])
    lo, hi = 1e3, 1e7
    cross = curves_cross(p, q, lo, hi)
    gap = lambda x, r: float(law_values(p[r], [x])[0] - law_values(q[r], [x])[0])  # noqa: E731
    for r in range(len(p)):
        grid = np.geomspace(lo, hi, 400)
        signs = np.sign([gap(x, r) for x in grid])
        change = np.flatnonzero(signs[:-1] * signs[1:] < 0)
        if len(change) == 0:
            assert math.isnan(cross[r])
            continue
        root = optimize.brentq(gap, grid[change[0]], grid[change[0] + 1], args=(r,))
        assert cross[r] == pytest.approx(root, rel=1e-3)
    assert np.isfinite(cross).any()


def test_the_band_is_the_pointwise_percentile_of_the_bootstrap_curves():
    rng = np.random.default_rng(19)
    fit = fit_scaling(SIZES, [73.0 * n**-0.5 + 1.4 + 0.01 * rng.standard_normal(3) for n in SIZES], draws=300)
    grid = np.geomspace(SIZES[0], SIZES[-1], 5)
    lo, hi = band(fit, grid)
    curves = law_values(fit.draws(), grid)
    curves = curves[np.isfinite(curves).all(axis=1)]
    for q, limit in ((2.5, lo), (97.5, hi)):
        ref = np.array([float(stats.scoreatpercentile(curves[:, j], q)) for j in range(len(grid))])
        np.testing.assert_allclose(limit, ref)
