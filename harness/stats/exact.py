"""Exact randomisation tests: the sign-flip test of paired differences, and the permutation test
of Spearman's rank correlation. Distribution-free p values, no asymptotic law at a handful of seeds.

Under "no difference" the variant and the baseline are exchangeable within each seed's pair, so
each difference d_i is as likely to be -d_i: every one of the 2^n sign patterns of (d_1..d_n) is
equally likely, whatever the law of d (bimodal, skewed). The p value is the share of patterns
whose sum is at least as extreme as the observed one (Fisher 1935; Good 2005, ch. 3). It can be
no smaller than 2 / 2^n two-sided (1 / 2^n one-sided): 0.0625 at 5 seeds, 0.031 at 6.

Spearman's rho of (x, y) is the Pearson r of their ranks; under "no association" every ordering of
y against x is equally likely, and the p value is the share of orderings whose |rho| is at least
the observed one."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np

Alternative = Literal["two-sided", "greater", "less"]
EXACT_UP_TO = 16  # seeds up to which every sign pattern is enumerated (65,536 patterns)
MONTE_CARLO = 200_000  # random patterns beyond that (a fixed seed: the same data give the same p)
ORDERINGS_EXACT_UP_TO = 8  # variants whose every ordering is enumerated (8! = 40,320)
ORDERINGS_MONTE_CARLO = 20_000  # random orderings beyond that (a fixed seed), p = (b + 1) / (m + 1)
EXACT_TEXT = (
    "exact sign-flip test of the paired differences (every 2^n sign pattern; valid for any law of the "
    "differences under no difference)"
)


@lru_cache(maxsize=32)
def _patterns(n: int) -> np.ndarray:
    """(P, n) sign patterns: all 2^n up to EXACT_UP_TO seeds, else MONTE_CARLO random ones."""
    if n <= EXACT_UP_TO:
        codes = np.arange(2**n, dtype=np.int64)[:, None]  # (2^n, 1)
        bits = (codes >> np.arange(n)) & 1  # (2^n, n)
        return 1.0 - 2.0 * bits
    rng = np.random.default_rng(90_173 + n)
    return rng.choice([-1.0, 1.0], size=(MONTE_CARLO, n))


def sign_flip_p(diffs: Sequence[float], alternative: Alternative = "two-sided", shift: float = 0.0) -> float:
    """The sign-flip p value of ``diffs - shift`` (the null: symmetric about ``shift``):
    two-sided on |sum|, or one-sided ("greater": the differences lie above ``shift``)."""
    d = np.asarray([float(x) for x in diffs], dtype=float) - shift  # (n,)
    if len(d) == 0:
        return 1.0
    sums = _patterns(len(d)) @ d  # (P,) the sum under each sign pattern
    observed = float(d.sum())
    tol = 1e-9 * max(1.0, float(np.abs(d).sum()))  # ties within round-off count as extreme
    if alternative == "two-sided":
        return float(np.mean(np.abs(sums) >= abs(observed) - tol))
    if alternative == "greater":
        return float(np.mean(sums >= observed - tol))
    return float(np.mean(sums <= observed + tol))


def least_p(n: int, two_sided: bool = True) -> float:
    """The smallest p the sign-flip test can give with ``n`` pairs (every sign alike)."""
    return (2.0 if two_sided else 1.0) / 2.0**n if n > 0 else 1.0


def min_seeds(alpha: float = 0.05, two_sided: bool = True) -> int:
    """The fewest paired seeds at which the sign-flip test can reach ``alpha``: 6 at 5% two-sided."""
    return max(1, math.ceil(math.log2((2.0 if two_sided else 1.0) / alpha)))


def spearman_permutation_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided permutation p of Spearman's rho: the share of orderings of ``y`` against ``x`` whose
    |rho| is at least the observed (all orderings up to ORDERINGS_EXACT_UP_TO, else a seeded sample)."""
    from scipy import stats  # scipy loads in a second: only when a correlation is tested

    rx, ry = stats.rankdata(x), stats.rankdata(y)  # (n,) each

    def rho(r: np.ndarray) -> np.ndarray:  # (m, n) orderings of ry -> (m,) Pearson r of ranks
        a, b = rx - rx.mean(), r - r.mean(axis=-1, keepdims=True)
        return (b @ a) / np.sqrt((a @ a) * (b * b).sum(axis=-1))

    seen = abs(float(rho(ry[None, :])[0])) - 1e-12  # float ties count as at least as extreme
    n = len(ry)
    if n <= ORDERINGS_EXACT_UP_TO:
        orders = np.array(list(itertools.permutations(range(n))))  # (n!, n)
        return float(np.mean(np.abs(rho(ry[orders])) >= seen))
    rng = np.random.default_rng(0)
    draws = np.argsort(rng.random((ORDERINGS_MONTE_CARLO, n)), axis=1)  # (m, n) random orderings
    return float((np.sum(np.abs(rho(ry[draws])) >= seen) + 1) / (len(draws) + 1))
