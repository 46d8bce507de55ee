"""Numerical checks of the trust gate: finite on long scaled inputs, deterministic under a seed."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch

from attnbench.contract.variant import MixerOutput
from attnbench.gate.common import (
    DETERMINISTIC_TOL,
    INPUT_SCALE,
    CheckContext,
    CheckResult,
    build_mixer,
    fmt,
    is_worse,
    logits_of,
    models,
    normal,
    tokens,
    verdict,
)


def _amax(t: torch.Tensor) -> float:
    """max |t| as a float; NaN if any element is NaN (inf stays inf)."""
    t = t.detach().float()  # upcast: half-precision maxima compare exactly in fp32
    return math.nan if torch.isnan(t).any() else float(t.abs().max())


def _worst(figures: list[float]) -> float:
    out = 0.0
    for f in figures:
        out = f if is_worse(f, out) else out
    return out


def check_finite(ctx: CheckContext) -> CheckResult:
    """Each layer's bare mixer at ``long_T`` tokens with inputs ~ N(0, 10^2), train mode
    (dropout 0): outputs, auxiliary losses and gradients (input and parameters) finite.
    fp32 everywhere, and under each autocast dtype the variant trains in (``ctx.autocast``).
    """
    name = "finite_long_inputs"
    T = ctx.long_T
    config = ctx.config.replace(context=max(ctx.config.context, T), dropout=0.0)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    precisions: list[tuple[str, torch.dtype | None]] = [("fp32", None)]
    precisions += [(f"{a} autocast", dtypes[a]) for a in ctx.autocast]  # what the variant will train under
    worst, where, parts = 0.0, "", []
    for layer in range(config.n_layer):
        mixer = build_mixer(ctx, layer, config).train()
        for label, dtype in precisions:
            mixer.zero_grad(set_to_none=True)
            x = (INPUT_SCALE * normal(ctx, 1, T, config.d_model)).requires_grad_()  # (1, T, D)
            amp = torch.autocast(ctx.device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with amp:
                out = mixer(x)
            y = out.y if isinstance(out, MixerOutput) else out  # (1, T, D)
            aux = [a.value.float() for a in out.aux] if isinstance(out, MixerOutput) else []
            r = normal(ctx, 1, T, config.d_model, offset=1)  # (1, T, D) random cotangent
            loss = (y.float() * r).sum()  # () fp32 reduction even under autocast
            for a in aux:
                loss = loss + a.sum()  # () auxiliary objectives must stay finite too
            loss.backward()
            grads = [g for g in [x.grad, *(p.grad for p in mixer.parameters())] if g is not None]
            fy = _worst([_amax(y)] + [_amax(a) for a in aux])
            fg = _worst([_amax(g) for g in grads])
            if layer == 0:
                parts.append(f"{label}: max|y| {fmt(fy)}, max|grad| {fmt(fg)}")
            for fig, what in ((fy, "output"), (fg, "gradient")):
                if not math.isfinite(fig) and not where:
                    where = f"non-finite {what} at layer {layer}, {label}"
                worst = _worst([worst, fig])
    detail = f"T={T}, inputs x{INPUT_SCALE:g}: " + (where + "; " if where else "") + "layer 0 " + "; ".join(parts)
    status = "pass" if math.isfinite(worst) else "fail"
    return CheckResult(name, status, worst, None, detail)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so NaNs compare equal to themselves when bitwise equal."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)  # (numel * itemsize,)


def _run_once(ctx: CheckContext, train: bool) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """Build under the seed and run one forward (eval) or forward+backward with dropout 0.1."""
    cpu_ctx = dataclasses.replace(ctx, device=torch.device("cpu"))
    config = ctx.config.replace(dropout=0.1) if train else ctx.config
    T, V = min(48, config.context), config.vocab_size
    runs = []
    for label, model in models(cpu_ctx, config):
        model.train(train)
        idx = tokens(cpu_ctx, 2, T, offset=3)  # (B, T)
        torch.manual_seed(ctx.seed + 1)  # dropout masks
        with torch.set_grad_enabled(train):
            out = model(idx, targets=tokens(cpu_ctx, 2, T, offset=4) if train else None)
        got = {"logits": logits_of(out, (2, T, V), f"{label} forward")}
        if train and getattr(out, "loss", None) is not None:
            out.loss.backward()
            got["loss"] = out.loss
            got.update({f"grad {n}": p.grad for n, p in model.named_parameters() if p.grad is not None})
        runs.append((label, got))
    return runs


def check_deterministic(ctx: CheckContext) -> CheckResult:
    """Two builds and runs under one seed give bitwise-identical results, on CPU: an eval
    forward, and a training forward+backward with dropout 0.1 (logits, loss, gradients).
    """
    name = "deterministic"
    worst, where, n = 0.0, "", 0
    for train in (False, True):
        mode = "train (dropout 0.1)" if train else "eval"
        for (label, a), (_, b) in zip(_run_once(ctx, train), _run_once(ctx, train), strict=True):
            for key in a:
                n += 1
                if key not in b or a[key].shape != b[key].shape:
                    worst, where = math.inf, f"{label}, {mode}: {key} missing or reshaped"
                    continue
                if torch.equal(_bits(a[key]), _bits(b[key])):
                    continue
                diff = (a[key].detach().float() - b[key].detach().float()).abs()  # same shape
                dev = float(diff.nan_to_num(nan=math.inf).max())
                dev = dev if dev > 0 else math.inf  # bits differ, values not: NaNs, signed zeros
                if is_worse(dev, worst):
                    worst, where = dev, f"{label}, {mode}: {key}"
    detail = f"max |run1 - run2| = {fmt(worst)} over {n} tensors on cpu" + (
        f", largest in {where}" if where else " (bitwise equal)"
    )
    return verdict(name, worst, DETERMINISTIC_TOL, detail)
