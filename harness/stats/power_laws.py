"""Scaling laws of loss against size (non-embedding parameters or training FLOPs), fitted with
intervals that a reviewer can check: the law the data support, bootstrap intervals over seeds,
residuals and a lack-of-fit test (numpy/scipy only; the scaling experiment and the report read it;
attnbench.stats.scaling_comparison sets one variant's fit against the baseline's)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from attnbench.plan.scaling_spec import MIN_SCALING_SIZES  # 4: 3 sizes would interpolate a 3-parameter law
from attnbench.stats.intervals import satterthwaite, seed_mean_draws, widened

# --- Scaling laws --------------------------------------------------------------------------
# Two laws of loss against size x (parameters or training FLOPs):
#   saturating  L = a x^-b + c   (c >= 0: the loss no size removes)
#   pure        L = a x^-b       (the same with c = 0)
# Both are least squares in L on the mean loss per size (weighted by its seeds). The data
# "support" the saturating law only when an F test of its extra term rejects c = 0 at 5%;
# otherwise the pure law is kept (the conservative choice: an irreducible loss is claimed
# only on evidence). The test is on the boundary c = 0, where the F reference is itself
# conservative. Intervals come from resampling seeds within each size (``seed_mean_draws``).

SATURATING, PURE = "saturating", "pure"
LAW_TEXT = {SATURATING: "a·x^-b + c", PURE: "a·x^-b"}

BOOT_DRAWS = 1000
BOOT_SEED = 20_250_601  # fixed: the same points give the same intervals, here and in the report
LAW_ALPHA = 0.05  # the F test that keeps the irreducible term


def too_few_sizes_text(n_sizes: int) -> str:
    """What a scaling fit over fewer than ``MIN_SCALING_SIZES`` sizes is shown as: not a fit."""
    s = "s" if n_sizes != 1 else ""
    return f"{n_sizes} size{s}: too few to fit (a scaling law needs {MIN_SCALING_SIZES} sizes)"


@dataclass(frozen=True)
class PowerLaw:
    a: float
    b: float
    c: float
    rmse: float
    n_points: int


def fit_laws(
    x: npt.ArrayLike,
    Y: npt.ArrayLike,
    law: str = SATURATING,
    weights: npt.ArrayLike | None = None,
    grid: int = 100,
    iters: int = 100,
) -> np.ndarray:
    """Least-squares fits of one law to every row of ``Y`` (R, k) at sizes ``x`` (k,):
    returns (R, 4) columns a, b, c, weighted SSE (c = 0 for the pure law).

    x is scaled by its geometric mean (so a stays O(y)); the start is the best point of a grid
    over c (``_profile_c``), refined by Levenberg-Marquardt steps (``_refine``)."""
    xs = np.asarray(x, dtype=np.float64)  # (k,)
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))  # (R, k)
    if law not in LAW_TEXT:
        raise ValueError(f"unknown law {law!r}; use {SATURATING!r} or {PURE!r}")
    if (xs <= 0).any() or (Y <= 0).any():
        raise ValueError("power-law sizes and losses must be positive")
    w = np.ones(Y.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)  # (k,)
    x0 = float(np.exp(np.log(xs).mean()))
    lu = np.log(xs / x0)  # (k,) log scaled sizes
    sat = law == SATURATING
    theta, best = _profile_c(lu, Y, w, grid if sat else 0)
    theta, best = _refine(theta, best, lu, Y, w, 3 if sat else 2, iters)
    a = np.exp(theta[:, 0]) * x0 ** theta[:, 1]  # undo the scaling: a u^-b = a x0^b x^-b
    return np.stack([a, theta[:, 1], theta[:, 2], best], axis=1)


def _profile_c(lu: np.ndarray, Y: np.ndarray, w: np.ndarray, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """The start of each row: (R, 3) (log a, b, c) and its weighted SSE, at the best c of ``grid``
    values denser near min(y) (for each c the rest is a weighted linear fit of log(y - c) on log u);
    ``grid`` 0: c = 0 (the pure law)."""
    R = len(Y)
    top = Y.min(axis=1)  # (R,)
    C = top[:, None] * (1.0 - np.geomspace(1.0, 1e-6, grid))[None, :] if grid else np.zeros((R, 1))  # (R, G)
    wl = w / w.sum()
    lbar = float(wl @ lu)
    Z = np.log(Y[:, None, :] - C[:, :, None])  # (R, G, k)
    zbar = Z @ wl  # (R, G)
    b = -((Z - zbar[..., None]) @ (wl * (lu - lbar))) / float(wl @ (lu - lbar) ** 2)  # (R, G)
    loga = zbar + b * lbar
    sse = (np.exp(loga[..., None] - b[..., None] * lu) + C[..., None] - Y[:, None, :]) ** 2 @ w  # (R, G)
    g, rows = sse.argmin(axis=1), np.arange(R)
    return np.stack([loga[rows, g], b[rows, g], C[rows, g]], axis=1), sse[rows, g]


def _refine(
    theta: np.ndarray, best: np.ndarray, lu: np.ndarray, Y: np.ndarray, w: np.ndarray, p: int, iters: int
) -> tuple[np.ndarray, np.ndarray]:
    """Levenberg-Marquardt steps on the first ``p`` of (log a, b, c) per row, each kept only where
    it lowers the row's SSE and keeps 0 <= c < min(y); returns the refined (theta, SSE)."""
    top = Y.min(axis=1)  # (R,)
    lam = np.full(len(Y), 1e-3)
    eye = np.eye(p)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(iters):
            act = np.flatnonzero(lam < 1e8)  # rows still moving (a row converged rejects until here)
            if len(act) == 0:
                break
            th, y = theta[act], Y[act]  # (r, 3), (r, k)
            E = np.exp(th[:, :1] - th[:, 1:2] * lu)  # (r, k) a u^-b
            J = np.stack([E, -E * lu, np.ones_like(E)][:p], axis=-1)  # (r, k, p)
            Jw = J * w[:, None]  # (r, k, p)
            A = Jw.transpose(0, 2, 1) @ J  # (r, p, p)
            grad = (Jw * (y - E - th[:, 2:])[..., None]).sum(axis=1)  # (r, p)
            damp = lam[act, None, None] * (A * eye + 1e-12 * eye)
            cand = th.copy()
            cand[:, :p] += np.linalg.solve(A + damp, grad[..., None])[..., 0]
            cand_sse = ((np.exp(cand[:, :1] - cand[:, 1:2] * lu) + cand[:, 2:] - y) ** 2) @ w  # (r,)
            ok = np.isfinite(cand_sse) & (cand_sse < best[act]) & (cand[:, 2] >= 0) & (cand[:, 2] < top[act])
            theta[act[ok]], best[act[ok]] = cand[ok], cand_sse[ok]
            lam[act] = np.where(ok, lam[act] * 0.3, lam[act] * 10.0)
    return theta, best


def fit_power_law(x: list[float], y: list[float], grid: int = 400, iters: int = 60) -> PowerLaw:
    """Fit y = a x^-b + c with 0 <= c < min(y) (least squares in y; see ``fit_laws``)."""
    if len(x) < 3:
        raise ValueError(f"a 3-parameter power law needs at least 3 points, got {len(x)}")
    a, b, c, sse = fit_laws(x, [y], SATURATING, grid=grid, iters=iters)[0]
    return PowerLaw(float(a), float(b), float(c), math.sqrt(sse / len(x)), len(x))


def law_values(params: npt.ArrayLike, x: npt.ArrayLike) -> np.ndarray:
    """a x^-b + c for rows (..., 3+) of (a, b, c) at sizes x: (..., len(x))."""
    P = np.asarray(params, dtype=np.float64)
    xs = np.asarray(x, dtype=np.float64)
    return P[..., :1] * xs ** -P[..., 1:2] + P[..., 2:3]


@dataclass
class ScalingFit:
    """Both laws fitted to one variant's mean loss per size, the one the data support, the
    lack-of-fit test against seed noise, and bootstrap draws over seeds (per law, on demand)."""

    x: tuple[float, ...]  # size per point (ascending)
    groups: tuple[tuple[float, ...], ...]  # seed losses per size
    law: str  # SATURATING or PURE: the law the data support
    fits: dict[str, np.ndarray]  # law -> (a, b, c, sse)
    f_p: float | None  # F test of the irreducible term (saturating against pure)
    lof_p: float | None  # lack of fit: misses against seed noise (None without 2 seeds somewhere)
    lof_f: float | None  # its F statistic: mean squared miss over seed variance
    seed: int
    n_draws: int = BOOT_DRAWS
    _draws: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _means: np.ndarray | None = field(default=None, repr=False)

    @property
    def means(self) -> np.ndarray:
        return np.array([np.mean(g) for g in self.groups])

    @property
    def lof_dof(self) -> int:
        return len(self.x) - (3 if self.law == SATURATING else 2)

    @property
    def inflation(self) -> float:
        """sqrt(F) of the lack-of-fit test where it rejects at 5% (the law misses sizes by more
        than seeds vary), else 1: draws and intervals then carry the misfit, not seed noise alone."""
        if self.lof_p is None or self.lof_f is None or self.lof_p >= LAW_ALPHA:
            return 1.0
        return math.sqrt(max(self.lof_f, 1.0))

    def mean_draws(self) -> np.ndarray:
        """(draws, k) bootstrap means per size, shared by both laws' draws."""
        if self._means is None:
            self._means = seed_mean_draws(self.groups, self.n_draws, self.seed)
        return self._means

    def draws(self, law: str | None = None) -> np.ndarray:
        """(draws, 4) bootstrap fits (a, b, c, sse) of ``law`` (default: the supported one)."""
        law = law or self.law
        if law not in self._draws:
            d = fit_laws(self.x, self.mean_draws(), law, [len(g) for g in self.groups])
            if self.inflation > 1:  # spread about the median, all three parameters alike
                mid = np.nanmedian(d[:, :3], axis=0)
                d[:, :3] = mid + self.inflation * (d[:, :3] - mid)
            self._draws[law] = d
        return self._draws[law]

    def params(self, law: str | None = None) -> np.ndarray:
        return self.fits[law or self.law]

    def residuals(self, law: str | None = None) -> np.ndarray:
        """Mean loss minus the fitted law, per size."""
        return self.means - law_values(self.params(law), self.x)

    def sensitivity(self, law: str | None = None) -> np.ndarray:
        """(p, k): the change of the fitted (log a, b[, c]) per unit change of each size's mean
        loss, at the fit (the weighted least-squares hat matrix of the linearised law)."""
        law = law or self.law
        a, b, _, _ = self.params(law)
        x = np.asarray(self.x)
        E = a * x**-b  # (k,)
        J = np.stack(
            [E, -E * np.log(x / np.exp(np.log(x).mean())), np.ones_like(E)][: 3 if law == SATURATING else 2], 1
        )
        Jw = J * np.array([len(g) for g in self.groups], dtype=np.float64)[:, None]  # (k, p)
        return np.linalg.pinv(Jw.T @ J) @ Jw.T

    def variance_terms(self, grad: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Per size: grad_i^2 s^2 / m_i, its share of a linear statistic's variance at the
        pooled seed spread s^2, and the degrees of freedom the bootstrap has for that size's
        spread (m_i - 1: it resamples the size's own seeds; a one-seed size draws from the pool).

        The shares use the pooled spread, not each size's own: from 2-3 seeds a size's own
        spread is so noisy that one size would dominate by chance, the degrees of freedom
        collapse, and the interval covers ~98% (simulated); at the pooled spread the degrees
        of freedom are the design's (its leverage per size) and the rate is the stated 95%.
        Where the law does not fit (``inflation`` > 1) the variance is the misses' instead: one
        term, inflated, with the lack-of-fit test's k - p degrees of freedom."""
        m = np.array([len(g) for g in self.groups], dtype=np.float64)
        ss = float(sum(((np.asarray(g) - np.mean(g)) ** 2).sum() for g in self.groups))
        pooled_dof = float((m - 1).sum())
        s2 = ss / pooled_dof if pooled_dof else 0.0
        dof = np.where(m > 1, m - 1, max(pooled_dof, 1.0))
        t = np.asarray(grad, dtype=np.float64) ** 2 * s2 / m
        if self.inflation > 1:
            return np.array([t.sum() * self.inflation**2]), np.array([float(self.lof_dof)])
        return t, dof

    def terms(self, name: str, law: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``variance_terms`` of parameter ``name`` ("b" or "c") of ``law``."""
        return self.variance_terms(self.sensitivity(law)["abc".index(name)])

    def ci(self, name: str, law: str | None = None, level: float = 0.95) -> tuple[float, float]:
        """Bootstrap interval of parameter ``name`` of ``law``, widened for few seeds (``widened``)."""
        return widened(self.draws(law)[:, "abc".index(name)], satterthwaite([self.terms(name, law)]), level)


def fit_scaling(
    x: npt.ArrayLike, groups: Sequence[npt.ArrayLike], seed: int = BOOT_SEED, draws: int = BOOT_DRAWS
) -> ScalingFit:
    """Fit both laws to seed losses ``groups`` at sizes ``x`` (at least MIN_SCALING_SIZES)."""
    from scipy import stats  # imported here: `attnbench --help` imports no scipy

    sizes = np.asarray(x, dtype=np.float64)  # (k,)
    order = np.argsort(sizes)
    xs = tuple(float(sizes[i]) for i in order)
    gs = tuple(tuple(float(v) for v in np.asarray(groups[i], dtype=np.float64).ravel()) for i in order)
    k = len(xs)
    if k < MIN_SCALING_SIZES or len(set(xs)) < k:
        raise ValueError(too_few_sizes_text(len(set(xs))))
    if any(len(g) == 0 for g in gs):
        raise ValueError("every size needs at least one seed's loss")
    means, m = np.array([np.mean(g) for g in gs]), np.array([len(g) for g in gs])
    fits = {law: fit_laws(xs, [means], law, m)[0] for law in (SATURATING, PURE)}
    sse_sat, sse_pure = fits[SATURATING][3], fits[PURE][3]
    gain = max(sse_pure - sse_sat, 0.0)
    if gain <= 1e-12 * max(sse_pure, 1e-300):
        f_p = 1.0
    elif sse_sat <= 0:
        f_p = 0.0
    else:
        f_p = float(stats.f.sf(gain / (sse_sat / (k - 3)), 1, k - 3))
    law = SATURATING if f_p < LAW_ALPHA else PURE
    pe_dof = int((m - 1).sum())
    ss_pe = float(sum(((np.asarray(g) - np.mean(g)) ** 2).sum() for g in gs))
    lof_dof = k - (3 if law == SATURATING else 2)
    lof_f = lof_p = None
    if pe_dof > 0 and lof_dof > 0 and ss_pe > 0:
        lof_f = float((fits[law][3] / lof_dof) / (ss_pe / pe_dof))
        lof_p = float(stats.f.sf(lof_f, lof_dof, pe_dof))
    return ScalingFit(xs, gs, law, fits, f_p, lof_p, lof_f, seed, draws)
