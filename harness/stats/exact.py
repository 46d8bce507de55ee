"""The sign-flip (randomisation) test of paired differences: exact, distribution-free p values.

Under "no difference" the variant and the baseline are exchangeable within each seed's pair, so
each difference d_i is as likely to be -d_i: every one of the 2^n sign patterns of (d_1..d_n) is
equally likely, whatever the law of d (bimodal, skewed). The p value is the share of patterns
whose sum is at least as extreme as the observed one (Fisher 1935; Good 2005, ch. 3). It can be
no smaller than 2 / 2^n two-sided (1 / 2^n one-sided): 0.0625 at 5 seeds, 0.031 at 6."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np

Alternative = Literal["two-sided", "greater", "less"]
EXACT_UP_TO = 16  # seeds up to which every sign pattern is enumerated (65,536 patterns)
MONTE_CARLO = 200_000  # random patterns beyond that (a fixed seed: the same data give the same p)
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
