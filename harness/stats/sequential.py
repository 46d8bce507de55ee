"""Seeds until decided: a group-sequential paired comparison whose decisions stay valid when
seeds are added only to the rows still undetermined (optional stopping).

Looks at n = min, min + 1, ..., max paired seeds, information fraction t = n / max. The
two-sided error is spent by a Lan-DeMets alpha-spending function (Lan & DeMets 1983):
  O'Brien-Fleming type  a(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))
  Pocock type           a(t) = alpha ln(1 + (e - 1) t)
Each look compares the paired t statistic with a boundary c_k that spends a(t_k) - a(t_{k-1}).
The variance is estimated, so the boundaries are calibrated on simulated null t paths (whose law
does not depend on the variance); z boundaries moved to t quantiles gave 5.8% at 2-9 degrees of
freedom. The paths are normal and skewed (gammas, skewness 1 and 2): a paired t from skewed
differences is called better or worse up to 2-3x as often as the Student-t level says, so each
boundary is the largest of the laws' (one look of n seeds is the fixed-seed test). Decisions
read repeated confidence intervals (RCIs), whose coverage holds over every look at once, whatever
the stopping rule:
  better / worse   the (1 - alpha) RCI of mean(d) excludes 0;
  equivalent       each one-sided (1 - alpha) bound lies inside (-margin, +margin) (sequential
                   TOST, the one-sided boundary set on the heavier tail);
  undetermined     neither (another seed, until max).
Pure numpy/scipy; attnbench.stats.paired adds the exact test and the shape checks to it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

Spending = Literal["obrien_fleming", "pocock"]
METHOD_TEXT = {
    "obrien_fleming": "group-sequential paired t, O'Brien-Fleming-type Lan-DeMets alpha spending",
    "pocock": "group-sequential paired t, Pocock-type Lan-DeMets alpha spending",
}
# outcome codes of the vectorised rule
UNDETERMINED, BETTER, WORSE, EQUIVALENT = 0, 1, 2, 3


def spent(t: float, alpha: float, spending: Spending) -> float:
    """The two-sided error spent by information fraction ``t`` (0 < t <= 1)."""
    if spending == "obrien_fleming":
        from scipy import stats  # scipy loads in a second: only when a boundary is computed

        return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))
    return float(alpha * math.log(1.0 + (math.e - 1.0) * t))


CALIBRATION_PATHS = 200_000  # null paths the t boundaries are calibrated on per law (fixed seed)
# The per-seed difference laws the boundaries hold under: normal, and centred gammas of shape 4 and
# 1 (skewness 1 and 2 in either direction: a variant that is sometimes much worse, or much better;
# skewness 2 is what a baseline with a slow mode on some seeds gives). Under skew the paired t
# statistic is itself skewed (seeds that miss the long tail sit close together), so the boundary is
# the largest of the laws' boundaries; a one-sided boundary (the equivalence tests) is set on the
# heavier tail. Shapes beyond these are tested on the data (attnbench.stats.shape).
CALIBRATION_LAWS = ("normal", "gamma4", "gamma1")
SKEW_BOUND = 2.0  # the skewness of gamma(1): the largest the calibration covers
ASSUMPTION_TEXT = (
    "calibrated (simulated) for per-seed differences that are normal, heavy-tailed, or skewed up to "
    f"skewness {SKEW_BOUND:g} either way; each row's differences are checked for two groups and for "
    "skew beyond that, and such rows get no decision on their mean"
)
Sides = Literal["two", "one"]


def _null_paths(law: str, paths: int, n: int) -> np.ndarray:
    """(paths, n) per-seed differences of mean 0 under ``law`` (a fixed seed per law)."""
    rng = np.random.default_rng(20_391 + CALIBRATION_LAWS.index(law))
    if law == "normal":
        return rng.standard_normal((paths, n))
    shape = 4.0 if law == "gamma4" else 1.0  # skewness 2 / sqrt(shape): 1 or 2
    return (rng.standard_gamma(shape, (paths, n)) - shape) / math.sqrt(shape)  # mean 0, sd 1


def _bound(t: np.ndarray, count: int, sides: Sides) -> float:
    """The smallest c with at most ``count`` of ``t`` beyond it: |t| > c (two-sided), or on each
    side, t > c and t < -c (one-sided, the heavier side decides)."""
    if len(t) == 0:
        return math.inf
    if count <= 0:
        return float(np.max(np.abs(t))) * (1 + 1e-9)
    k = min(count, len(t) - 1)
    tails = [np.abs(t)] if sides == "two" else [t, -t]
    return max(float((s[k - 1] + s[k]) / 2) for s in (np.sort(x)[::-1] for x in tails))


def _law_bounds(law: str, looks: tuple[int, ...], alpha: float, spending: Spending, sides: Sides) -> list[float]:
    """One law's boundaries: at each look the paths still open cross with the error spent there."""
    from scipy import stats  # scipy loads in a second: only when a boundary is computed

    x = _null_paths(law, CALIBRATION_PATHS, looks[-1])  # (P, max) null differences
    total, prev, bounds = looks[-1], 0.0, []
    open_ = np.ones(CALIBRATION_PATHS, dtype=bool)
    for n in looks:
        y = x[:, :n]  # (P, n)
        t = y.mean(axis=1) / (y.std(axis=1, ddof=1) / math.sqrt(n))  # (P,) signed paired t
        share = spent(n / total, alpha, spending)
        cross, prev = int(round((share - prev) * CALIBRATION_PATHS)), share
        if law == "normal" and n == looks[0]:  # nothing stopped yet: the exact Student-t quantile
            c = float(stats.t.isf(share / 2.0 if sides == "two" else share, n - 1))
        else:
            c = _bound(t[open_], cross, sides)
        bounds.append(c)
        open_ &= np.abs(t) < c
    return bounds


@lru_cache(maxsize=64)
def t_bounds(looks: tuple[int, ...], alpha: float, spending: Spending, sides: Sides = "two") -> tuple[float, ...]:
    """Boundaries for the paired t = mean(d) / (sd(d) / sqrt(n)) at cumulative seed counts ``looks``
    (the last is the maximum), each spending a(t_k) - a(t_{k-1}) of the error: P(|t_j| < c_j for
    j < k, |t_k| >= c_k) (two-sided), or that on each side separately (one-sided), under every law
    of CALIBRATION_LAWS (the larger boundary of the laws). A t path is free of the unknown scale,
    so the boundaries are calibrated on simulated null paths (fixed seeds: the same design gives
    the same boundaries)."""
    # spend 4 naive Monte Carlo standard errors less (fitting look by look doubles the error),
    # so calibration noise cannot inflate the rate
    alpha -= 4.0 * math.sqrt(alpha * (1.0 - alpha) / CALIBRATION_PATHS)
    per_law = [_law_bounds(law, looks, alpha, spending, sides) for law in CALIBRATION_LAWS]
    return tuple(max(cs) for cs in zip(*per_law, strict=True))


@dataclass(frozen=True)
class Design:
    """A seeds-until-decided design: looks at n = min..max paired seeds, two-sided ``alpha``."""

    min: int
    max: int
    spending: Spending = "obrien_fleming"
    alpha: float = 0.05

    @property
    def looks(self) -> tuple[int, ...]:
        return tuple(range(self.min, self.max + 1))

    def t_crit(self, n: int, alpha: float | None = None, sides: Sides = "two") -> float:
        """The critical |t| at a look of ``n`` seeds (level ``alpha``, two-sided or on each side)."""
        a = self.alpha if alpha is None else alpha
        if n < 2:
            return math.inf
        if n < self.min or n > self.max:
            raise ValueError(f"{n} paired seeds is outside this design's looks {self.min}..{self.max}")
        return t_bounds(self.looks, a, self.spending, sides)[n - self.min]

    def look_alpha(self, n: int) -> float:
        """The error a test at the look of ``n`` seeds may spend: the spending function's increment
        there (a union bound over the looks: a test repeated at every look, such as the share
        test of seeds that split, keeps the design's level)."""
        if n < self.min or n > self.max:
            return 0.0
        before = spent((n - 1) / self.max, self.alpha, self.spending) if n > self.min else 0.0
        return spent(n / self.max, self.alpha, self.spending) - before

    def method(self) -> str:
        return f"{METHOD_TEXT[self.spending]} over {self.min}..{self.max} seeds (repeated confidence intervals)"


def design_of(protocol: dict[str, Any]) -> Design | None:
    """The seeds-until-decided design a stored protocol names (``seeds: {min, max}``); None for fixed seeds."""
    rule = protocol.get("seeds")
    if not isinstance(rule, dict):
        return None
    return Design(int(rule["min"]), int(rule["max"]), rule.get("spending") or "obrien_fleming")


def decide_arrays(
    mean: np.ndarray | float,
    sd: np.ndarray | float,
    n: int,
    design: Design,
    margin: float | None,
    higher_is_better: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(outcome codes, RCI low, RCI high) of paired differences with ``mean`` and ``sd`` at a
    look of ``n`` seeds (arrays of any shape; vectorised for simulation)."""
    mean, se = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float) / math.sqrt(n)
    half = design.t_crit(n) * se
    lo, hi = mean - half, mean + half
    out = np.full(np.shape(mean), UNDETERMINED, dtype=np.int8)
    if margin is not None:
        half_eq = design.t_crit(n, design.alpha, "one") * se  # each one-sided test at alpha
        out[(mean - half_eq > -margin) & (mean + half_eq < margin)] = EQUIVALENT
    up, down = (BETTER, WORSE) if higher_is_better else (WORSE, BETTER)
    out[lo > 0] = up
    out[hi < 0] = down
    return out, lo, hi


def simulate(design: Design, effect: float, margin: float | None, sims: int, seed: int = 0) -> dict[str, float]:
    """Share of ``sims`` comparisons (per-seed differences N(effect, 1), higher is better) ending
    in each outcome when seeds are added until decided or ``design.max``; and mean seeds used."""
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, 1.0, size=(sims, design.max))  # (S, max) per-seed differences
    final = np.full(sims, UNDETERMINED, dtype=np.int8)
    used = np.full(sims, design.max)
    open_ = np.ones(sims, dtype=bool)
    for n in design.looks:
        x = d[:, :n]  # (S, n)
        codes, _, _ = decide_arrays(x.mean(axis=1), x.std(axis=1, ddof=1), n, design, margin, True)
        stop = open_ & (codes != UNDETERMINED)
        final[stop], used[stop] = codes[stop], n
        open_ &= ~stop
    return {
        "better": float(np.mean(final == BETTER)),
        "worse": float(np.mean(final == WORSE)),
        "equivalent": float(np.mean(final == EQUIVALENT)),
        "undetermined": float(np.mean(final == UNDETERMINED)),
        "mean_seeds": float(used.mean()),
    }
