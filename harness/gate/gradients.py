"""Gradients against float64 at trained magnitudes (issue 57): ``grad_float64_at_scale``.

The value checks compare outputs; a backward can be wrong or imprecise while every output is
right (a factorised decay e^{G_i} e^{-G_j} put Mamba2's A_log fp32 gradient up to 34x further
from float64 than fla's fp32 recurrence, its outputs equal). Each layer type's bare mixer, train
mode (dropout 0), its projection weights scaled as in the value checks (x1, x4, x16, one extreme
early token, T = 260), is copied to float64 (the same weights: one build); both run on the same
input with the same random cotangent, and each parameter's gradient (and the input's) is compared:

    relative error = max |g - g64| / max |g64|      per parameter group (a named parameter)

judged against the tolerance of the dtype the gradient was computed in (``GRAD_TOL``: fp32, and
each autocast dtype the variant trains in, at that dtype's magnitudes). A group whose float64
gradient is below ``GRAD_FLOOR`` of the layer's largest is measured against that floor (a bias in
front of a normalisation has a zero gradient in exact arithmetic: only rounding is left).

Inputs x100 at weights x1 (``INPUT_SCALES``, the issue's setting: decays of 10^2 per step, a
saturated softmax) are measured and reported, not judged: there the softmax family's fp32
gradients are 7e-4 .. 2e-3 off float64 whatever computes them (torch's math attention as much as
its fused kernel: the fp32 rounding of q.k logits of 10^3..10^4), so no fp32 tolerance separates
a defect from the dtype. A mixer that calls ``scaled_dot_product_attention`` has that kernel's own
deviation measured on the q, k and v it was given and named in the detail (torch's, accepted); at
inputs x100 its gradients are also taken with the math backend, to show how much of the figure
the fused kernel adds. At a judged magnitude such a mixer is held to max(tol, ``SDPA_FACTOR`` x the
kernel's own deviation): never failed for torch's kernel alone.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from attnbench.gate.common import CheckContext, CheckResult, fmt, is_worse, layer_types, mixer_y, normal
from attnbench.gate.float64 import float64_output
from attnbench.gate.scale import AUTOCAST_TOL, SCALE_FACTORS, _inputs, _magnitudes, _scaled_mixer, _where

NAME = "grad_float64_at_scale"
# max |g - g64| / max |g64| per parameter group, judged at weights x1, x4, x16 (docs/trust.md).
# Each is 10x a reference's own worst, measured on a CPU (one thread) with this check's inputs:
# fp32: fla's naive fp32 recurrences patched into our GLA, Gated DeltaNet and Mamba2 reach 4.1e-5
#   (Gated DeltaNet's input gradient at weights x16), torch's math attention 1.3e-5 (softmax).
# bf16 / fp16 autocast: softmax (torch's SDPA) reaches 2.3e-2 (bf16) and 2.9e-3 (fp16) at weights
#   x4, where autocast_at_scale judges values too (the built-ins: up to 1.2e-1 and 1.2e-2, Based's
#   feature map); above x4 reported, not judged. (bf16 and fp16 on a CPU, avx512_bf16.)
GRAD_TOL = {"fp32": 4e-4, "bf16": 2.5e-1, "fp16": 3e-2}
GRAD_UP_TO = {"fp32": 16.0, "bf16": 4.0, "fp16": 4.0}  # weight scales above this: reported, not judged
INPUT_SCALES = (100.0,)  # fp32 at inputs x this, weights x1: reported, not judged
GRAD_FLOOR = 1e-6  # a group's gradient below this x the layer's largest is measured against the floor
SDPA_FACTOR = 10.0  # a mixer that calls SDPA: held to max(tol, this x the kernel's own deviation)
_AMP = {"bf16": torch.bfloat16, "fp16": torch.float16}

Magnitude = tuple[float, float]  # (weights x, inputs x)


class _SdpaCalls(TorchFunctionMode):
    """Keeps detached copies of the inputs of the first few ``scaled_dot_product_attention`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and len(self.calls) < 4:
            self.calls.append((tuple(map(_detached, args)), {k: _detached(v) for k, v in kwargs.items()}))
        return func(*args, **kwargs)


def _widened(value: Any, wide: bool) -> Any:
    """A floating tensor in float64 when ``wide``; anything else as it is."""
    return value.double() if wide and isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _detached(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _rel(got: torch.Tensor, ref: torch.Tensor, floor: float) -> float:
    """max |got - ref| / max(max |ref|, floor); NaN where either holds a non-finite value."""
    diff = (got.double() - ref.double()).abs()
    if not torch.isfinite(diff).all():
        return math.nan
    return float(diff.max()) / max(float(ref.abs().max()), floor, 1e-300)


def _amp(device: torch.device, amp: torch.dtype | None) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=amp) if amp is not None else contextlib.nullcontext()


def _sdpa_deviation(calls: list[tuple[tuple[Any, ...], dict[str, Any]]], amp: torch.dtype | None) -> float:
    """The worst relative deviation from float64 of torch's own SDPA gradients (q, k, v) on the
    inputs a mixer gave it, in the precision the mixer ran; 0 when it made no call."""
    worst = 0.0
    for args, kwargs in calls:
        q, k, v = args[:3]
        options = {key: val for key, val in kwargs.items() if key != "dropout_p"}
        gen = torch.Generator().manual_seed(5)
        cotangent = torch.randn(*q.shape[:-1], v.shape[-1], generator=gen, dtype=torch.float64).to(q.device)
        grads = []
        for wide in (False, True):
            inputs = [_widened(t, wide).requires_grad_() for t in (q, k, v)]
            with _amp(q.device, None if wide else amp):
                y = F.scaled_dot_product_attention(
                    *inputs,
                    *(_widened(a, wide) for a in args[3:]),
                    **{key: _widened(val, wide) for key, val in options.items()},
                )
            grads.append(torch.autograd.grad((y.double() * cotangent).sum(), inputs))  # outside autocast
        for got, ref in zip(*grads, strict=True):
            dev = _rel(got, ref, 0.0)
            worst = dev if is_worse(dev, worst) else worst
    return worst


@contextlib.contextmanager
def _forward(sdpa: _SdpaCalls, math_sdpa: bool, device: torch.device, amp: torch.dtype | None) -> Iterator[None]:
    """The low-precision forward's context: SDPA's inputs noted, torch's math attention when
    ``math_sdpa``, autocast to ``amp`` when given."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(sdpa)
        if math_sdpa:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        stack.enter_context(_amp(device, amp))
        yield


def _gradients(
    model: torch.nn.Module,
    x: torch.Tensor,
    r: torch.Tensor,
    wide: bool,
    forward: contextlib.AbstractContextManager | None = None,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """{"input": d/dx, parameter name: d/dp} of sum(y * r); ``wide``: the float64 run (its
    output through ``float64_output``, which names a mixer that cannot take float64).
    ``forward``: a context for the forward alone (autocast, a backend); the backward runs
    outside it, as a training step's does."""
    inp = x.detach().clone().requires_grad_()
    torch.manual_seed(seed)  # a mixer that draws in training draws alike in both runs
    with forward or contextlib.nullcontext():
        y = float64_output(model, inp) if wide else mixer_y(model(inp))  # (B, T, D)
    if not wide and not torch.isfinite(y).all():
        raise FloatingPointError("non-finite output")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    found = torch.autograd.grad((y.double() * r).sum(), [inp] + [p for _, p in named], allow_unused=True)
    return {n: g for n, g in zip(["input"] + [n for n, _ in named], found, strict=True) if g is not None}


def _group_errors(
    ctx: CheckContext, magnitude: Magnitude, layer: int, amp: torch.dtype | None, math_sdpa: bool = False
) -> tuple[dict[str, float], float, str]:
    """({group: relative error}, SDPA's own deviation, overflow note) for one layer type and
    magnitude (weights x, inputs x), gradients in fp32 (or under ``amp`` autocast) against
    float64. ``math_sdpa``: the low-precision run with torch's math attention backend."""
    factor, scale = magnitude
    mixer = _scaled_mixer(ctx, factor, layer=layer).train()
    mixer64 = copy.deepcopy(mixer).double()  # the same weights, one build
    x = scale * _inputs(ctx)  # (B, T, D)
    r = normal(ctx, *x.shape, offset=11).double()  # (B, T, D) cotangent
    ref = _gradients(mixer64, x.double(), r, wide=True, seed=ctx.seed + 13)
    sdpa = _SdpaCalls()
    try:
        got = _gradients(
            mixer, x, r, wide=False, forward=_forward(sdpa, math_sdpa, ctx.device, amp), seed=ctx.seed + 13
        )
    except FloatingPointError:  # the value checks name the overflow
        return {}, 0.0, f"non-finite output at {_label(magnitude)}, not judged here (float64_at_scale names it)"
    scale_of = max((float(g.abs().max()) for g in ref.values()), default=0.0)
    errors = {name: _rel(got[name], ref[name], GRAD_FLOOR * scale_of) for name in ref if name in got}
    errors.update({name: math.inf for name in set(ref) ^ set(got)})  # a gradient in one precision only
    return errors, _sdpa_deviation(sdpa.calls, amp), ""


def _label(magnitude: Magnitude) -> str:
    factor, scale = magnitude
    return f"weights x{factor:g}" + (f", inputs x{scale:g}" if scale != 1 else "")


def _precisions(ctx: CheckContext) -> list[tuple[str, torch.dtype | None, list[Magnitude]]]:
    """(dtype label, autocast dtype, magnitudes): fp32 at every weight scale and at inputs
    x``INPUT_SCALES``; each autocast dtype at its own weight scales (fp16 overflows past x4)."""
    out: list[tuple[str, torch.dtype | None, list[Magnitude]]] = [
        ("fp32", None, [(f, 1.0) for f in SCALE_FACTORS] + [(1.0, s) for s in INPUT_SCALES])
    ]
    out += [(label, _AMP[label], [(f, 1.0) for f in AUTOCAST_TOL[label][2]]) for label in ctx.autocast]
    return out


Judged = dict[str, tuple[float, str, float]]  # group -> (error, where, bound) at its worst ratio
Reported = dict[str, tuple[float, str]]  # group -> (error, where) at magnitudes not judged


def _judge(
    ctx: CheckContext, label: str, amp: torch.dtype | None, magnitudes: list[Magnitude], notes: list[str]
) -> tuple[float, bool, Judged, Reported]:
    """One precision at its magnitudes: (worst ratio error / bound, whether a group is over its
    bound, judged groups, reported groups); notes on overflow and torch's SDPA added to ``notes``."""
    tol = GRAD_TOL[label]
    worst_ratio, failed = 0.0, False
    judged: Judged = {}
    reported: Reported = {}
    sdpa_worst: dict[str, tuple[float, str, float]] = {}  # layer -> torch's SDPA deviation, where, bound
    for (layer, kind), magnitude in ((t, m) for t in layer_types(ctx) for m in magnitudes):
        errors, sdpa, overflow = _group_errors(ctx, magnitude, layer, amp)
        prefix, where = _where(ctx, layer, kind), _label(magnitude)
        if overflow:
            notes.append(f"{label}: {prefix}{overflow}")
            continue
        held = magnitude[1] == 1 and magnitude[0] <= GRAD_UP_TO[label]
        bound = max(tol, SDPA_FACTOR * sdpa)
        if sdpa > 0 and (prefix not in sdpa_worst or is_worse(sdpa, sdpa_worst[prefix][0])):
            sdpa_worst[prefix] = (sdpa, where, bound if held else tol)
        if sdpa > 0 and not held and label == "fp32":
            plain = _group_errors(ctx, magnitude, layer, amp, math_sdpa=True)[0]
            notes.append(
                f"{prefix}{where}: worst group {fmt(max(errors.values(), default=0.0))} with torch's fused "
                f"attention, {fmt(max(plain.values(), default=0.0))} with its math attention: a saturated "
                "softmax's fp32 rounding, not the kernel (accepted: reported, not judged)"
            )
        for group, err in errors.items():
            key = prefix + group
            if not held:
                if key not in reported or is_worse(err, reported[key][0]):
                    reported[key] = (err, where)
                continue
            ratio = err / bound if math.isfinite(err) else math.nan
            failed = failed or not ratio <= 1.0
            worst_ratio = ratio if is_worse(ratio, worst_ratio) else worst_ratio
            if key not in judged or is_worse(ratio, judged[key][0] / judged[key][2]):
                judged[key] = (err, where, bound)
    notes += [
        f"{label} {prefix}torch's scaled_dot_product_attention alone is up to {fmt(dev)} off float64 on "
        f"this mixer's q, k, v ({where}; its backward, accepted"
        + (f": judged against {fmt(bound)}" if bound > tol else "")
        + ")"
        for prefix, (dev, where, bound) in sdpa_worst.items()
    ]
    return worst_ratio, failed, judged, reported


def _summary(label: str, magnitudes: list[Magnitude], judged: Judged, reported: Reported) -> str:
    """One precision's part of the detail: groups over their bound, every judged group (worst
    ratio first) and the three worst reported ones."""
    tol = GRAD_TOL[label]
    over = sorted(g for g, (e, _, b) in judged.items() if not e <= b)
    shown = ", ".join(
        f"{g} {fmt(e)} ({w})" for g, (e, w, _) in sorted(judged.items(), key=lambda kv: -kv[1][0] / kv[1][2])
    )
    extra = ", ".join(
        f"{g} {fmt(e)} ({w})" for g, (e, w) in sorted(reported.items(), key=lambda kv: -kv[1][0])[:3]
    )  # the three worst
    up_to = GRAD_UP_TO[label] < max(f for f, _ in magnitudes)
    return (
        f"{label} (tol {tol:g}"
        + (f", judged up to weights x{GRAD_UP_TO[label]:g}" if up_to else "")
        + "): "
        + (f"OVER TOLERANCE {', '.join(over)}; " if over else "")
        + shown
        + (f"; not judged: {extra}" if extra else "")
    )


def check_grad_float64_at_scale(ctx: CheckContext) -> CheckResult:
    """Gradients per parameter group against float64, in fp32 and each autocast dtype the variant
    trains in, at every magnitude. The figure is the worst judged error over its bound (the
    dtype's tolerance, or SDPA_FACTOR x torch's SDPA deviation where that is larger): <= 1 passes."""
    worst_ratio, failed, parts, notes = 0.0, False, [], []
    for label, amp, magnitudes in _precisions(ctx):
        ratio, over, judged, reported = _judge(ctx, label, amp, magnitudes, notes)
        worst_ratio = ratio if is_worse(ratio, worst_ratio) else worst_ratio
        failed = failed or over
        parts.append(_summary(label, magnitudes, judged, reported))
    detail = (
        "max |g - g64| / max |g64| per parameter group, worst magnitude in brackets: "
        + "; ".join(parts)
        + "".join(f"; {n}" for n in dict.fromkeys(notes))
        + f"; {_magnitudes(SCALE_FACTORS, ctx)}; and fp32 at inputs x{'/x'.join(f'{s:g}' for s in INPUT_SCALES)}"
    )
    return CheckResult(NAME, "fail" if failed else "pass", worst_ratio, 1.0, detail)
