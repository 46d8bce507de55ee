"""Seeds until decided: a group-sequential paired comparison whose decisions stay valid when
seeds are added only to the rows still undetermined (optional stopping).

Looks at n = min, min + 1, ..., max paired seeds, information fraction t = n / max. The
two-sided error is spent by a Lan-DeMets alpha-spending function (Lan & DeMets 1983):
  O'Brien-Fleming type  a(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))
  Pocock type           a(t) = alpha ln(1 + (e - 1) t)
Each look compares the paired t statistic with a boundary c_k that spends a(t_k) - a(t_{k-1}).
The variance is estimated, so the boundaries are calibrated on simulated null t paths (whose law
does not depend on the variance); z boundaries moved to t quantiles gave 5.8% at 2-9 degrees of
freedom. Decisions read repeated confidence intervals (RCIs), whose coverage holds over every
look at once, whatever the stopping rule:
  better / worse   the (1 - alpha) RCI of mean(d) excludes 0;
  equivalent       the (1 - 2 alpha) RCI lies inside (-margin, +margin) (sequential TOST);
  undetermined     neither (another seed, until max).
Pure numpy/scipy; plan/ (next seed round) and report/ (decisions) both read it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

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


CALIBRATION_PATHS = 200_000  # null paths the t boundaries are calibrated on (fixed seed)


@lru_cache(maxsize=64)
def t_bounds(looks: tuple[int, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    """Two-sided boundaries for |t| = |mean(d)| / (sd(d) / sqrt(n)) at cumulative seed counts
    ``looks`` (the last is the maximum), each spending a(t_k) - a(t_{k-1}) of the error:
    P(|t_j| < c_j for j < k, |t_k| >= c_k) under no difference. The path of t statistics is
    free of the unknown variance under normal differences, so the boundaries are calibrated on
    simulated null paths (a fixed seed: the same design gives the same boundaries)."""
    # spend 4 naive Monte Carlo standard errors less (fitting look by look doubles the error),
    # so calibration noise cannot inflate the rate; one look is the exact t test
    from scipy import stats  # see spent()

    alpha -= 4.0 * math.sqrt(alpha * (1.0 - alpha) / CALIBRATION_PATHS) * min(1, len(looks) - 1)
    rng = np.random.default_rng(20_391)
    x = rng.standard_normal((CALIBRATION_PATHS, looks[-1]))  # (P, max) null differences
    total, prev, bounds = looks[-1], 0.0, []
    open_ = np.ones(CALIBRATION_PATHS, dtype=bool)
    for n in looks:
        y = x[:, :n]  # (P, n)
        t = np.abs(y.mean(axis=1) / (y.std(axis=1, ddof=1) / math.sqrt(n)))  # (P,)
        share = spent(n / total, alpha, spending)
        cross, prev = int(round((share - prev) * CALIBRATION_PATHS)), share
        inside = np.sort(t[open_])[::-1]  # open paths, largest |t| first
        if n == looks[0]:  # nothing stopped yet: the exact Student-t quantile
            c = float(stats.t.isf(share / 2.0, n - 1))
        elif cross <= 0:
            c = float(inside[0]) * (1 + 1e-9) if len(inside) else math.inf
        else:  # exactly ``cross`` open paths reach it: midway between the cross-th and the next
            c = float((inside[cross - 1] + inside[min(cross, len(inside) - 1)]) / 2)
        bounds.append(c)
        open_ &= t < c
    return tuple(bounds)


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

    def t_crit(self, n: int, alpha: float | None = None) -> float:
        """The Student-t critical value at a look of ``n`` seeds (two-sided level ``alpha``)."""
        a = self.alpha if alpha is None else alpha
        if n < 2:
            return math.inf
        if n < self.min or n > self.max:
            raise ValueError(f"{n} paired seeds is outside this design's looks {self.min}..{self.max}")
        return t_bounds(self.looks, a, self.spending)[n - self.min]

    def method(self) -> str:
        return f"{METHOD_TEXT[self.spending]} over {self.min}..{self.max} seeds (repeated confidence intervals)"


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
        half_eq = design.t_crit(n, 2.0 * design.alpha) * se
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
