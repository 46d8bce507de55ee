"""Speed curves against sequence length (numpy only): log-log slopes with 95% intervals, and the
length from which a variant stays faster than its baseline.

    log y = log k + s log T          (ordinary least squares; s is the scaling exponent)

(the scaling laws of loss against size are attnbench.stats.power_laws)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from attnbench.stats.intervals import t_quantile_975


@dataclass(frozen=True)
class SlopeFit:
    slope: float
    intercept: float  # log k (natural log)
    stderr: float | None  # None with only two points
    ci95: tuple[float, float] | None
    n_points: int
    T_min: int
    T_max: int


MIN_SLOPE_POINTS = 3  # a line through 2 points always fits exactly: no residual, no interval, no test


def too_few_text(n_points: int) -> str:
    """What a slope over fewer than ``MIN_SLOPE_POINTS`` points is shown as: not a fit."""
    return f"{n_points} point{'s' if n_points != 1 else ''}: too few to fit (a slope needs {MIN_SLOPE_POINTS})"


def loglog_slope(Ts: list[int], ys: list[float], T_from: int = 0) -> SlopeFit | None:
    """Least-squares slope of log y against log T over the points with T >= T_from and
    y > 0 (a zero cannot be logged: e.g. memory below the measurement's resolution).
    None with fewer than two such points (or all at one T)."""
    pts = sorted((int(T), float(y)) for T, y in zip(Ts, ys, strict=True) if T_from <= T and y is not None and y > 0)
    if len({T for T, _ in pts}) < 2:
        return None
    x = np.log([T for T, _ in pts])  # (n,)
    v = np.log([y for _, y in pts])  # (n,)
    n = len(pts)
    xc = x - x.mean()  # centred: the slope's variance is sigma^2 / sum(xc^2)
    slope = float((xc * (v - v.mean())).sum() / (xc * xc).sum())
    intercept = float(v.mean() - slope * x.mean())
    stderr = ci = None
    if n > 2:
        resid = v - (intercept + slope * x)  # (n,)
        stderr = float(math.sqrt((resid @ resid) / (n - 2) / (xc @ xc)))
        half = t_quantile_975(n - 2) * stderr
        ci = (slope - half, slope + half)
    return SlopeFit(slope, intercept, stderr, ci, n, pts[0][0], pts[-1][0])


@dataclass(frozen=True)
class Crossover:
    status: str  # "found", "always", "never" or "no-baseline"
    T: int | None  # first T from which the variant stays faster
    T_interp: float | None  # log-log interpolation between the grid points around it
    compared: list[int]


def crossover(variant: Mapping[int, float | None], baseline: Mapping[int, float | None]) -> Crossover:
    """First length from which ``variant`` is faster than ``baseline`` at every longer
    compared length. Values are times (None: the point failed or was skipped); a length
    counts when at least one side has a time: a failed baseline with a timed variant is
    "faster", a failed variant against a timed baseline is "slower"."""
    common = sorted(T for T in set(variant) & set(baseline) if variant[T] is not None or baseline[T] is not None)
    if not baseline or not common:
        return Crossover("no-baseline", None, None, common)

    def faster(T: int) -> bool:
        v, b = variant[T], baseline[T]
        return v is not None and (b is None or v < b)

    first = None
    for T in reversed(common):  # walk down while the variant stays faster
        if not faster(T):
            break
        first = T
    if first is None:
        return Crossover("never", None, None, common)
    if first == common[0]:
        return Crossover("always", first, None, common)
    prev = common[common.index(first) - 1]
    return Crossover("found", first, _interpolate(prev, first, variant, baseline), common)


def _interpolate(lo: int, hi: int, variant: Mapping, baseline: Mapping) -> float | None:
    """Where log(variant / baseline) crosses zero on the log T axis between lo and hi."""
    if None in (variant[lo], baseline[lo], variant[hi], baseline[hi]):
        return None
    r_lo = math.log(variant[lo] / baseline[lo])  # >= 0: slower at lo
    r_hi = math.log(variant[hi] / baseline[hi])  # < 0: faster at hi
    if r_lo == r_hi:
        return None
    frac = r_lo / (r_lo - r_hi)
    return float(math.exp(math.log(lo) + frac * (math.log(hi) - math.log(lo))))
