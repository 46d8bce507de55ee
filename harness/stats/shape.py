"""Checks of the shape of a row's per-seed differences, before a mean decides anything.

The paired t's critical values hold for the laws they were calibrated on (attnbench.stats.sequential:
normal, and skewness up to SKEW_BOUND). Two shapes fall outside, and each is tested on the data:
  two groups   seeds in a slow mode and the rest: sorted differences with a gap between two groups
               of at least 2 seeds each, gap / pooled within-group sd above the 99th percentile
               that statistic reaches on normal differences of the same n (1% false alarms);
  skewed       sample skewness (adjusted Fisher-Pearson) beyond the 95th percentile of |skewness|
               that differences of the calibrated bound's law (a gamma of skewness SKEW_BOUND)
               reach at the same n.
A row with either gets no decision on its mean (the reason is printed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from attnbench.stats.sequential import SKEW_BOUND

_PATHS = 40_000  # simulated rows per calibration (fixed seeds: the same n gives the same threshold)
GAP_QUANTILE = 0.99
SKEW_QUANTILE = 0.95


def _gaps(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows,) largest gap / pooled within-group sd over the splits of sorted ``x`` (rows, n) into
    two groups of at least 2, and (rows,) the size of the lower group at that split."""
    x = np.sort(x, axis=1)  # (R, n)
    n = x.shape[1]
    best, at = np.zeros(len(x)), np.zeros(len(x), dtype=int)
    for i in range(2, n - 1):
        low, high = x[:, :i], x[:, i:]  # (R, i), (R, n - i)
        ss = ((low - low.mean(1, keepdims=True)) ** 2).sum(1) + ((high - high.mean(1, keepdims=True)) ** 2).sum(1)
        within = np.sqrt(ss / (n - 2))  # (R,) pooled within-group sd
        stat = (x[:, i] - x[:, i - 1]) / np.maximum(within, 1e-300)  # (R,)
        better = stat > best
        best, at = np.where(better, stat, best), np.where(better, i, at)
    return best, at


def _skewness(x: np.ndarray) -> np.ndarray:
    """(rows,) adjusted Fisher-Pearson sample skewness of ``x`` (rows, n)."""
    n = x.shape[1]
    c = x - x.mean(1, keepdims=True)  # (R, n)
    m2, m3 = (c**2).mean(1), (c**3).mean(1)
    g1 = m3 / np.maximum(m2, 1e-300) ** 1.5
    return g1 * math.sqrt(n * (n - 1)) / (n - 2)


@lru_cache(maxsize=64)
def gap_threshold(n: int) -> float:
    """The gap statistic's GAP_QUANTILE on normal differences of ``n`` seeds."""
    if n < 4:
        return math.inf
    z = np.random.default_rng(31_337 + n).standard_normal((_PATHS, n))
    return float(np.quantile(_gaps(z)[0], GAP_QUANTILE))


@lru_cache(maxsize=64)
def skew_threshold(n: int) -> float:
    """|skewness|'s SKEW_QUANTILE on differences of ``n`` seeds from a gamma of skewness SKEW_BOUND."""
    if n < 3:
        return math.inf
    shape = 4.0 / SKEW_BOUND**2  # a gamma's skewness is 2 / sqrt(shape)
    g = np.random.default_rng(27_183 + n).standard_gamma(shape, (_PATHS, n))
    return float(np.quantile(np.abs(_skewness(g)), SKEW_QUANTILE))


@dataclass(frozen=True)
class Shape:
    """What the checks found in a row's per-seed differences."""

    n: int
    skewness: float
    gap: float  # gap / pooled within-group sd at the widest split
    low_group: int  # seeds below that gap
    two_groups: bool
    skewed: bool

    @property
    def valid(self) -> bool:
        return not (self.two_groups or self.skewed)

    def reason(self) -> str:
        """Why the mean decides nothing here ('' where the shape is within the calibrated range)."""
        if self.two_groups:
            return (
                f"per-seed differences form two groups ({self.low_group} and {self.n - self.low_group} seeds, "
                f"gap {self.gap:.1f} within-group sd): a mean over two modes decides nothing"
            )
        if self.skewed:
            return (
                f"per-seed differences skewed beyond the calibrated range (skewness {self.skewness:+.2f}; "
                f"{SKEW_QUANTILE:.0%} of skewness-{SKEW_BOUND:g} samples stay within ±{skew_threshold(self.n):.2f})"
            )
        return ""


def check_shape(diffs: Sequence[float]) -> Shape:
    """The shape checks on one row's per-seed differences (fewer than 4 seeds: nothing to test)."""
    d = np.asarray([float(x) for x in diffs], dtype=float)[None, :]  # (1, n)
    n = d.shape[1]
    if n < 3 or float(np.ptp(d)) == 0.0:
        return Shape(n, 0.0, 0.0, 0, False, False)
    skew = float(_skewness(d)[0])
    gap, at = (float(v[0]) for v in _gaps(d)) if n >= 4 else (0.0, 0.0)
    return Shape(n, skew, gap, int(at), gap > gap_threshold(n), abs(skew) > skew_threshold(n))
