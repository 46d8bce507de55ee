"""Time-to-event statistics over seeds, where the event is "first reached the target" and a seed
that never reached it is censored at its budget (numpy/scipy only).

  Kaplan-Meier       S(t) = prod_{t_j <= t} (1 - d_j / n_j)  (share of seeds not yet there)
  Greenwood          Var S(t) = S(t)^2 sum_{t_j <= t} d_j / (n_j (n_j - d_j))
  median             the first t with S(t) <= 0.5 (None: not reached)
  Brookmeyer-Crowley 95% interval of the median: the t whose pointwise interval S(t) +- 1.96 se
                     holds 0.5, i.e. [first t with S_lo(t) <= 0.5, first t with S_hi(t) <= 0.5]
  log-rank           the statistic (O_1 - E_1)^2 / V, summed over the distinct event times with
                     the hypergeometric variance (Mantel 1966); its p is a permutation p, never
                     the chi^2(1) approximation: the share of the C(n_1 + n_2, n_1) re-assignments
                     of the pooled (time, reached) pairs to the two arms whose statistic is at
                     least the observed one (two-sided), all of them while there are at most
                     EXACT_LIMIT, else MONTE_CARLO random ones with a fixed seed, p = (b + 1) /
                     (m + 1). With 3 vs 3 seeds the smallest p any data can give is 2/20 = 0.1,
                     so such arms "cannot decide" at 5% (``LogRank.decidable``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

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


ALPHA = 0.05  # the level the report decides at
EXACT_LIMIT = 50_000  # enumerate every re-assignment up to this many
MONTE_CARLO = 9_999  # random re-assignments beyond it, p = (b + 1) / (m + 1)
MONTE_CARLO_SEED = 0
_TIE = 1e-9  # relative tolerance: a re-assignment's statistic equal to the observed one up to float error counts


@dataclass(frozen=True)
class LogRank:
    chi2: float  # the log-rank statistic (O_1 - E_1)^2 / V of the observed arms (no chi^2 p is read from it)
    p: float  # two-sided permutation p: exact, or Monte Carlo where ``exact`` is False
    observed: float  # events of the first group
    expected: float  # what it would have had with no difference
    n1: int = 0  # seeds of the first group
    n2: int = 0  # seeds of the second
    min_p: float = 0.0  # the smallest p any re-assignment of these pooled seeds could give
    permutations: int = 0  # re-assignments counted: C(n1 + n2, n1) when exact, else the Monte Carlo draws
    exact: bool = True

    @property
    def faster(self) -> bool:
        """The first group reaches the target sooner than the no-difference expectation."""
        return self.observed > self.expected

    @property
    def decidable(self) -> bool:
        """Whether any outcome at these arms could reach p <= ALPHA."""
        return self.min_p <= ALPHA

    @property
    def significant(self) -> bool:
        return self.decidable and self.p <= ALPHA

    def method(self) -> str:
        """'exact permutation log-rank' or 'Monte Carlo permutation log-rank (9999 re-assignments)'."""
        if self.exact:
            return "exact permutation log-rank"
        return f"Monte Carlo permutation log-rank ({self.permutations} re-assignments)"


def _statistics(member: np.ndarray, risk: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(O_1 - E_1, the log-rank statistic) of each assignment.

    member: (M, N) 1 where a pooled seed is in the first arm; risk: (N, J) 1 where seed i is at
    risk at event time j; hit: (N, J) 1 where seed i reached the target at event time j."""
    n = risk.sum(axis=0)  # (J,) at risk, both arms
    d = hit.sum(axis=0)  # (J,) events, both arms
    n1 = member @ risk  # (M, J)
    d1 = member @ hit  # (M, J)
    diff = (d1 - d * n1 / n).sum(axis=1)  # (M,)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(n > 1, d * (n - d) / (n**2 * (n - 1)), 0.0)  # (J,)
    var = (n1 * (n - n1) * scale).sum(axis=1)  # (M,)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.where(var > 1e-12, diff**2 / var, 0.0)  # V = 0 only where O_1 = E_1
    return diff, stat


@lru_cache(maxsize=64)
def _assignments(n: int, n1: int) -> np.ndarray:
    """(C(n, n1), n) every choice of the first arm's n1 seeds among n, as 0/1 rows."""
    rows = np.array(list(combinations(range(n), n1)), dtype=np.intp).reshape(-1, n1)
    out = np.zeros((len(rows), n))
    np.put_along_axis(out, rows, 1.0, axis=1)
    return out


def _at_least(stats_: np.ndarray, value: float) -> np.ndarray:
    return stats_ >= value - _TIE * max(1.0, abs(value))


def log_rank(
    times_a: Sequence[float], events_a: Sequence[bool], times_b: Sequence[float], events_b: Sequence[bool]
) -> LogRank | None:
    """The permutation log-rank test of group a against b; None when no seed of either reached
    the target. Exact (every re-assignment) up to EXACT_LIMIT re-assignments, else Monte Carlo."""
    ta, ea = np.asarray(times_a, dtype=float), np.asarray(events_a, dtype=bool)
    tb, eb = np.asarray(times_b, dtype=float), np.asarray(events_b, dtype=bool)
    t, e = np.concatenate([ta, tb]), np.concatenate([ea, eb])
    at = np.unique(t[e])  # (J,) distinct event times
    if len(at) == 0:
        return None
    n1, n = len(ta), len(t)
    risk = (t[:, None] >= at[None, :]).astype(float)  # (N, J)
    hit = ((t[:, None] == at[None, :]) & e[:, None]).astype(float)  # (N, J)
    observed = np.zeros((1, n))
    observed[0, :n1] = 1.0
    diff, stat = _statistics(observed, risk, hit)
    o = float((observed @ hit).sum())
    count = math.comb(n, n1)
    if count <= EXACT_LIMIT:
        _, every = _statistics(_assignments(n, n1), risk, hit)
        p = float(_at_least(every, float(stat[0])).mean())
        min_p = float(_at_least(every, float(every.max())).mean())  # the most extreme assignment's p
        return LogRank(float(stat[0]), p, o, o - float(diff[0]), n1, n - n1, min_p, count, True)
    rng = np.random.default_rng(MONTE_CARLO_SEED)
    order = rng.random((MONTE_CARLO, n)).argsort(axis=1)[:, :n1]  # (m, n1) a random first arm each
    member = np.zeros((MONTE_CARLO, n))
    np.put_along_axis(member, order, 1.0, axis=1)
    _, drawn = _statistics(member, risk, hit)
    p = (int(_at_least(drawn, float(stat[0])).sum()) + 1) / (MONTE_CARLO + 1)
    min_p = 1.0 / (MONTE_CARLO + 1)  # the smallest a Monte Carlo p can be (the exact one is below it)
    return LogRank(float(stat[0]), p, o, o - float(diff[0]), n1, n - n1, min_p, MONTE_CARLO, False)
