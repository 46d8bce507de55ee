"""One variant's scaling fit against the baseline's (numpy/scipy only; the report words it).

Per x (parameters, FLOPs):
  law        the saturating law if either variant's data need the irreducible term, else
             the pure law (exponents of different laws are not comparable);
  b - b_base bootstrap draws of the two fits are independent (seeds of different variants
             are resampled separately); the interval is the percentile one widened by
             t / z at the difference's Welch-Satterthwaite degrees of freedom;
  decision   steeper / shallower where the 95% interval excludes 0 (steeper: the loss falls
             faster with size); "scales like" the baseline where the 90% interval lies
             inside +-margin (two one-sided tests at 5%) and only when the suite states a
             margin; otherwise undetermined. A difference found inside the margin is
             reported as the difference, "(within +-margin)" added;
  gap        mean loss minus the baseline's at the largest size both ran;
  crossing   the first size in [smallest, 10 x largest] where the fitted curves cross,
             with the bootstrap percentile interval of the draws' crossings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from attnbench.decision_words import SHALLOWER, STEEPER, UNDETERMINED
from attnbench.stats.intervals import satterthwaite, widened
from attnbench.stats.power_laws import PURE, SATURATING, ScalingFit, law_values

EXTRAPOLATE = 10.0  # crossings are searched up to this factor beyond the largest size
LIKE = "like"  # the outcome code of "scales like the baseline" (printed as SCALES_LIKE)


def decide_exponent(lo95: float, hi95: float, lo90: float, hi90: float, margin: float | None) -> tuple[str, bool]:
    """(outcome, within the margin) of b - b_base from its 95% and 90% intervals."""
    within = margin is not None and -margin < lo90 and hi90 < margin
    if lo95 > 0:
        return STEEPER, within
    if hi95 < 0:
        return SHALLOWER, within
    return (LIKE if within else UNDETERMINED), within


def common_law(v: ScalingFit, base: ScalingFit) -> str:
    return SATURATING if SATURATING in (v.law, base.law) else PURE


@dataclass(frozen=True)
class Comparison:
    law: str
    diff: float  # b - b_base of the point fits
    ci95: tuple[float, float]
    ci90: tuple[float, float]
    outcome: str
    within: bool
    gap: float | None  # mean loss - baseline's at the largest common size
    gap_ci95: tuple[float, float] | None
    gap_model: int | None
    cross: float | None  # where the fitted curves cross, None when not within the range
    cross_ci95: tuple[float, float] | None  # hi may be inf: beyond the searched range
    cross_share: float  # share of bootstrap draws whose curves cross within the range
    searched: tuple[float, float]


def compare_fits(
    v: ScalingFit,
    base: ScalingFit,
    margin: float | None,
    models: tuple[list[int], list[int]] | None = None,
) -> Comparison:
    """``v``'s exponent, loss and curve against ``base``'s (``models``: the model indices of
    their sizes, to find the largest size both ran; default: the same sizes)."""
    law = common_law(v, base)
    dv, db = v.draws(law)[:, 1], base.draws(law)[:, 1]
    diff_draws = dv - db
    dof = satterthwaite([v.terms("b", law), base.terms("b", law)])
    ci95, ci90 = widened(diff_draws, dof, 0.95), widened(diff_draws, dof, 0.90)
    outcome, within = decide_exponent(*ci95, *ci90, margin)
    gap = gap_ci = gap_model = None
    vm, bm = models or (list(range(len(v.x))), list(range(len(base.x))))
    common = sorted(set(vm) & set(bm))
    if common:
        gap_model = common[-1]
        i, j = vm.index(gap_model), bm.index(gap_model)
        gap = float(v.means[i] - base.means[j])
        one = [np.eye(len(v.x))[i], np.eye(len(base.x))[j]]
        gdof = satterthwaite([v.variance_terms(one[0]), base.variance_terms(one[1])])
        gap_ci = widened(v.mean_draws()[:, i] - base.mean_draws()[:, j], gdof)
    lo, hi = min(v.x[0], base.x[0]), EXTRAPOLATE * max(v.x[-1], base.x[-1])
    cross = float(curves_cross(v.params(law), base.params(law), lo, hi)[0])
    draws = curves_cross(v.draws(law), base.draws(law), lo, hi)
    share = float(np.isfinite(draws).mean())
    cross_ci = _order_interval(np.where(np.isfinite(draws), draws, np.inf)) if math.isfinite(cross) else None
    return Comparison(
        law,
        float(v.params(law)[1] - base.params(law)[1]),
        ci95,
        ci90,
        outcome,
        within,
        gap,
        gap_ci,
        gap_model,
        cross if math.isfinite(cross) else None,
        cross_ci,
        share,
        (lo, hi),
    )


def _order_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval by order statistics (infinite values allowed: beyond the range)."""
    v = np.sort(values)
    n = len(v)
    q = (1 - level) / 2
    return float(v[int(math.floor(q * n))]), float(v[min(n - 1, int(math.ceil((1 - q) * n)) - 1)])


def band(fit: ScalingFit, grid: npt.ArrayLike, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise bootstrap percentile band of the supported law's curve on ``grid``."""
    with np.errstate(over="ignore", invalid="ignore"):
        curves = law_values(fit.draws(), grid)  # (draws, G)
    curves = curves[np.isfinite(curves).all(axis=1)]
    q = (1 - level) / 2
    return np.quantile(curves, q, axis=0), np.quantile(curves, 1 - q, axis=0)


def curves_cross(p: npt.ArrayLike, q: npt.ArrayLike, lo: float, hi: float, points: int = 400) -> np.ndarray:
    """Per row pair of laws (a, b, c) ``p`` and ``q`` (R, 3+): the first size in [lo, hi] where
    p - q changes sign (log-linear between grid points); NaN where it keeps one sign."""
    P, Q = np.atleast_2d(np.asarray(p, dtype=np.float64)), np.atleast_2d(np.asarray(q, dtype=np.float64))
    grid = np.geomspace(lo, hi, points)  # (G,)
    with np.errstate(over="ignore", invalid="ignore"):
        gap = law_values(P, grid) - law_values(Q, grid)  # (R, G)
    s = np.sign(gap)
    change = s[:, :-1] * s[:, 1:] < 0  # (R, G-1)
    rows = np.flatnonzero(change.any(axis=1))
    i = np.argmax(change[rows], axis=1)  # first sign change per crossing row
    g0, g1 = gap[rows, i], gap[rows, i + 1]
    lg = np.log(grid)
    out = np.full(len(gap), np.nan)
    out[rows] = np.exp(lg[i] + g0 / (g0 - g1) * (lg[i + 1] - lg[i]))
    return out
