"""Time-to-event statistics over seeds, where the event is "first reached the target" and a seed
that never reached it is censored at its budget (numpy/scipy only).

  Kaplan-Meier       S(t) = prod_{t_j <= t} (1 - d_j / n_j)  (share of seeds not yet there)
  Greenwood          Var S(t) = S(t)^2 sum_{t_j <= t} d_j / (n_j (n_j - d_j))
  median             the first t with S(t) <= 0.5 (None: not reached)
  Brookmeyer-Crowley 95% interval of the median: the t whose pointwise interval S(t) +- 1.96 se
                     holds 0.5, i.e. [first t with S_lo(t) <= 0.5, first t with S_hi(t) <= 0.5]
  log-rank           (O_1 - E_1)^2 / V ~ chi^2(1), summed over the distinct event times with
                     the hypergeometric variance (Mantel 1966)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

Z975 = float(stats.norm.ppf(0.975))


@dataclass(frozen=True)
class Median:
    median: float | None  # None: fewer than half the seeds reached the target
    lo: float | None  # Brookmeyer-Crowley 95% limits; None: not reached
    hi: float | None
    events: int  # seeds that reached the target
    n: int


def kaplan_meier(times: Sequence[float], events: Sequence[bool]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct event times, S just after each, Greenwood standard error of S there)."""
    t, e = np.asarray(times, dtype=float), np.asarray(events, dtype=bool)
    at = np.unique(t[e])  # (J,) distinct event times
    n = np.array([(t >= u).sum() for u in at], dtype=float)  # at risk just before each
    d = np.array([((t == u) & e).sum() for u in at], dtype=float)  # events at each
    surv = np.cumprod(1.0 - d / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(n > d, d / (n * (n - d)), np.inf)
        se = np.where(surv > 0, surv * np.sqrt(np.cumsum(terms)), 0.0)  # S = 0: no spread left
    return at, surv, se


def median_time(times: Sequence[float], events: Sequence[bool]) -> Median:
    """The Kaplan-Meier median with its Brookmeyer-Crowley 95% interval (Greenwood, linear scale)."""
    at, surv, se = kaplan_meier(times, events)
    n, k = len(times), int(np.sum(np.asarray(events, dtype=bool)))

    def first(curve: np.ndarray) -> float | None:
        hit = np.nonzero(curve <= 0.5 + 1e-12)[0]
        return float(at[hit[0]]) if len(hit) else None

    return Median(first(surv), first(surv - Z975 * se), first(surv + Z975 * se), k, n)


@dataclass(frozen=True)
class LogRank:
    chi2: float
    p: float
    observed: float  # events of the first group
    expected: float  # what it would have had with no difference

    @property
    def faster(self) -> bool:
        """The first group reaches the target sooner than the no-difference expectation."""
        return self.observed > self.expected


def log_rank(
    times_a: Sequence[float], events_a: Sequence[bool], times_b: Sequence[float], events_b: Sequence[bool]
) -> LogRank | None:
    """The log-rank test of group a against b; None when no seed of either reached the target."""
    ta, ea = np.asarray(times_a, dtype=float), np.asarray(events_a, dtype=bool)
    tb, eb = np.asarray(times_b, dtype=float), np.asarray(events_b, dtype=bool)
    at = np.unique(np.concatenate([ta[ea], tb[eb]]))  # (J,) distinct event times
    if len(at) == 0:
        return None
    n1 = np.array([(ta >= u).sum() for u in at], dtype=float)
    n2 = np.array([(tb >= u).sum() for u in at], dtype=float)
    d1 = np.array([((ta == u) & ea).sum() for u in at], dtype=float)
    d = d1 + np.array([((tb == u) & eb).sum() for u in at], dtype=float)
    n = n1 + n2
    expected = d * n1 / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(n > 1, d * n1 * n2 * (n - d) / (n**2 * (n - 1)), 0.0)
    v, o, e = float(var.sum()), float(d1.sum()), float(expected.sum())
    if v <= 0:
        return LogRank(0.0, 1.0, o, e)
    chi2 = (o - e) ** 2 / v
    return LogRank(chi2, float(stats.chi2.sf(chi2, 1)), o, e)
