"""Gradients against float64 finite differences (issue 65): ``grad_finite_difference``.

``grad_float64_at_scale`` compares the fp32 gradient with the same code's float64 gradient, so a
backward wrong in every dtype (a custom autograd function off by 10% in fp32 and float64 alike)
passes it. This check needs no trust in the mixer's backward: each layer type's bare mixer in
float64, train mode (dropout 0), at the value checks' magnitudes (weights x1, x4, x16, the extreme
early token, T = 260), its analytic gradient of L = sum(y * r) (r a random cotangent) along one
direction u per parameter group and for the input, against the central differences

    (L(p + h u) - L(p - h u)) / 2h,   h = FD_STEP * max(|p|_2, 1) and twice that,   |u|_2 = 1,

u half the (normalised) analytic gradient's direction and half a random one, so the derivative
along u is never near 0 by chance and an error off the gradient's direction still shows. The
error of a group is |fd - <g, u>| / max(|<g, u>|, FD_FLOOR * the layer's largest |g|_2), less
NOISE_MARGIN x the two steps' disagreement (the difference's own error: a float32 step inside a
float64 mixer makes it noisy, and such a group is named, not judged), against ``FD_TOL``; the
figure is the worst group's error.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from attnbench.gate.common import CheckContext, CheckResult, fmt, is_worse, layer_types, normal
from attnbench.gate.float64 import float64_output
from attnbench.gate.gradients import _gradients
from attnbench.gate.scale import SCALE_FACTORS, _inputs, _magnitudes, _scaled_mixer, _where

NAME = "grad_finite_difference"
FD_STEP = 1e-6  # relative step of the central difference (float64: truncation ~1e-12, rounding ~1e-10)
FD_FLOOR = 1e-6  # a group's derivative below this x the layer's largest gradient norm: measured against it
# Built-ins at most 3.2e-6 (CPU, float64, the gate's magnitudes; docs/trust.md); 1e-3 leaves room for a
# mixer with a float32 step inside (its differences' noise, less the margin below), and is 10x below
# a gradient 1e-2 wrong.
FD_TOL = 1e-3
# The finite difference's own uncertainty is taken as how far the steps h and 2h disagree (rounding
# and truncation both move it); an error is counted beyond this many times that uncertainty.
NOISE_MARGIN = 3.0


def _loss(mixer: nn.Module, x: torch.Tensor, r: torch.Tensor, seed: int) -> float:
    torch.manual_seed(seed)  # a mixer that draws in training draws alike in every run
    with torch.no_grad():
        return float((float64_output(mixer, x) * r).sum())


def _direction(g: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A unit direction half along g, half random (random alone where g is 0)."""
    z = torch.randn(g.shape, generator=gen, dtype=torch.float64).to(g.device)
    u = z / z.norm().clamp_min(1e-300)
    norm = float(g.norm())
    if norm > 0 and math.isfinite(norm):
        u = u + g / norm
    return u / u.norm().clamp_min(1e-300)


def _central(mixer: nn.Module, target: torch.Tensor, u: torch.Tensor, h: float, loss: Callable[[], float]) -> float:
    """(L(p + h u) - L(p - h u)) / 2h, ``target`` restored bit for bit afterwards."""
    kept = target.detach().clone()
    with torch.no_grad():
        target.add_(h * u)
    up = loss()
    with torch.no_grad():
        target.copy_(kept).sub_(h * u)
    down = loss()
    with torch.no_grad():
        target.copy_(kept)
    return (up - down) / (2 * h)


def _group_errors(ctx: CheckContext, factor: float, layer: int) -> dict[str, tuple[float, float]]:
    """{group: (error, noise)} for one layer and scale: the error of the analytic directional
    derivative beyond the finite difference's own uncertainty (``NOISE_MARGIN`` x how far the
    steps h and 2h disagree), and that uncertainty, both relative."""
    mixer = _scaled_mixer(ctx, factor, torch.float64, layer).train()
    x = _inputs(ctx)[:1].double()  # (1, T, D)
    r = normal(ctx, *x.shape, offset=11).double()  # (1, T, D) cotangent
    seed = ctx.seed + 13
    grads = _gradients(mixer, x, r, wide=True, seed=seed)
    params = dict(mixer.named_parameters())
    largest = max((float(g.norm()) for g in grads.values()), default=0.0)
    gen = torch.Generator().manual_seed(ctx.seed * 1000 + 71 + layer)
    errors: dict[str, tuple[float, float]] = {}
    for name, g in grads.items():
        target = x if name == "input" else params[name]
        u = _direction(g, gen)
        h = FD_STEP * max(float(target.detach().norm()), 1.0)
        near, far = (_central(mixer, target, u, step, lambda: _loss(mixer, x, r, seed)) for step in (h, 2 * h))
        analytic = float((g * u).sum())
        scale = max(abs(analytic), FD_FLOOR * largest, 1e-300)
        noise = abs(near - far) / scale
        errors[name] = (max(0.0, abs(near - analytic) / scale - NOISE_MARGIN * noise), noise)
    return errors


def check_grad_finite_difference(ctx: CheckContext) -> CheckResult:
    """Each group's float64 analytic gradient against a float64 central difference, at every
    magnitude: a backward wrong in every dtype fails here, naming the group."""
    worst, where, over, unjudged = 0.0, "", {}, {}
    shown: dict[str, tuple[float, str]] = {}
    for (layer, label), factor in ((t, f) for t in layer_types(ctx) for f in SCALE_FACTORS):
        prefix = _where(ctx, layer, label)
        for group, (err, noise) in _group_errors(ctx, factor, layer).items():
            key, at = prefix + group, f"weights x{factor:g}"
            if key not in shown or is_worse(err, shown[key][0]):
                shown[key] = (err, at)
            if not err <= FD_TOL:
                over.setdefault(key, at)
            elif noise > FD_TOL:
                unjudged.setdefault(key, f"{fmt(noise)} at {at}")
            if is_worse(err, worst):
                worst, where = err, f"{key} ({at})"
    ranked = sorted(shown.items(), key=lambda kv: -kv[1][0] if math.isfinite(kv[1][0]) else -math.inf)
    detail = (
        "|fd - <g, u>| / |<g, u>| per parameter group along one direction u, float64 central differences"
        + (f"; OVER TOLERANCE {', '.join(f'{g} ({w})' for g, w in over.items())}" if over else "")
        + f"; worst {fmt(worst)}"
        + (f" at {where}" if where else "")
        + "; "
        + ", ".join(f"{g} {fmt(e)} ({w})" for g, (e, w) in ranked[:4])
        + (
            "; finite differences too noisy to judge (a float32 step inside the float64 mixer?): "
            + ", ".join(f"{g} {n}" for g, n in unjudged.items())
            if unjudged
            else ""
        )
        + f"; {_magnitudes(SCALE_FACTORS, ctx)}"
    )
    failed = bool(over) or not math.isfinite(worst)
    return CheckResult(NAME, "fail" if failed else "pass", worst, FD_TOL, detail)
