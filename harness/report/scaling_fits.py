"""Scaling fits read back for the report, in words: each variant's fit rebuilt from its stored
points (the same bootstrap draws the finalizer drew), its law and goodness of fit, and its
exponent, gap and crossing against the baseline's (attnbench.stats.scaling_comparison decides
them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnbench.decision_words import (
    DOES_NOT_FIT,
    FITS,
    IRREDUCIBLE_NEEDED,
    IRREDUCIBLE_NOT_SUPPORTED,
    MISFIT_MANY,
    MISFIT_ONE,
    NO_SEED_SPREAD,
    SCALES_LIKE,
    UNDETERMINED,
    WITHIN_MARGIN,
)
from attnbench.stats.power_laws import SATURATING, ScalingFit, fit_scaling
from attnbench.stats.scaling_comparison import EXTRAPOLATE, LIKE, Comparison


def fit_from_tags(tags: dict[str, Any]) -> ScalingFit | None:
    """The fit a stored "power_law" row describes (None for a row without one)."""
    if tags.get("law") is None or not tags.get("seed_losses"):
        return None
    return fit_scaling(tags["sizes"], tags["seed_losses"], seed=int(tags["boot_seed"]), draws=int(tags["boot_draws"]))


def goodness_text(fit: ScalingFit, unit: str = "N") -> str:
    """One plain line: does the law pass within seed noise of every size?"""
    resid = fit.residuals()
    i = int(np.argmax(np.abs(resid)))
    worst = f"largest miss {resid[i]:+.3g} nats ({abs(resid[i]) / fit.means[i]:.1%}) at {unit} = {fit.x[i]:.3g}"
    if fit.lof_p is None:
        return f"{NO_SEED_SPREAD} (one seed per size); {worst}"
    if fit.lof_p >= 0.05:
        return f"{FITS}: misses within seed noise (lack-of-fit p = {fit.lof_p:.2g}); {worst}"
    return (
        f"{DOES_NOT_FIT}: misses larger than seed noise explains (lack-of-fit p = {fit.lof_p:.2g}); {worst}; "
        f"read b as a trend over these sizes, not a law (its intervals widened x{fit.inflation:.2g} for the misses)"
    )


def law_text(fit: ScalingFit) -> str:
    """Which law, and the F test that chose it."""
    if fit.law == SATURATING:
        return f"a·x^-b + c ({IRREDUCIBLE_NEEDED}: F-test p = {fit.f_p:.2g})"
    return f"a·x^-b ({IRREDUCIBLE_NOT_SUPPORTED}: F-test p = {fit.f_p:.2g})"


def decision_text(outcome: str, within: bool, margin: float | None, baseline: str, misfit: Sequence[str] = ()) -> str:
    """The decision in words; ``misfit``: the variants whose law misses their sizes."""
    if outcome == LIKE:
        text = SCALES_LIKE.format(baseline=baseline, margin=f"{margin:g}")
    else:
        text = outcome + (
            f" {WITHIN_MARGIN.format(margin=f'{margin:g}')}" if within and outcome != UNDETERMINED else ""
        )
    if len(misfit) == 1:
        text += "; " + MISFIT_ONE.format(variant=misfit[0])
    elif misfit:
        text += "; " + MISFIT_MANY.format(variants=" and ".join(misfit))
    return text


def cross_text(c: Comparison, unit: str = "N") -> str:
    if c.cross is None:
        return (
            f"not within the fitted range (searched {unit} = {c.searched[0]:.3g} to {c.searched[1]:.3g}, "
            f"10x the largest size; {c.cross_share:.0%} of bootstrap draws cross there)"
        )
    lo, hi = c.cross_ci95 or (math.nan, math.nan)
    hi_text = f"beyond {c.searched[1]:.3g}" if not math.isfinite(hi) else f"{hi:.3g}"
    where = "extrapolated" if c.cross > c.searched[1] / EXTRAPOLATE else "within the sizes run"
    return f"{unit} ≈ {c.cross:.3g} [{lo:.3g}, {hi_text}] ({where}; {c.cross_share:.0%} of bootstrap draws cross)"
