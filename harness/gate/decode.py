"""Trust-gate checks that use the decode contract: incremental = parallel, declared facts."""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from typing import Any

import torch
from torch import nn

from attnbench.contract.variant import MixerOutput, decoding, state_numel
from attnbench.gate.common import (
    CHUNK_SIZES,
    FACTS_TOL,
    INCREMENTAL_T,
    INCREMENTAL_TOL,
    MIXED_SCHEDULE,
    STATE_LENGTHS,
    CheckContext,
    CheckResult,
    ContractError,
    build_mixer,
    fmt,
    is_worse,
    logits_of,
    models,
    normal,
    rel_dev,
    tokens,
    verdict,
)
from attnbench.gate.decode_lengths import decode_at_lengths
from attnbench.nn.backbone import Backbone
from attnbench.nn.model import LanguageModel

BATCH = 2


def _step_through(
    model: LanguageModel, idx: torch.Tensor, sizes: tuple[int, ...], state: Any, label: str, V: int
) -> tuple[torch.Tensor, Any]:
    """Feed idx (B, T) through ``model.step`` in chunks cycling through ``sizes``."""
    B, T = idx.shape
    outs: list[torch.Tensor] = []
    pos, i = 0, 0
    while pos < T:
        n = min(sizes[i % len(sizes)], T - pos)
        out, state = model.step(idx[:, pos : pos + n], state)
        outs.append(logits_of(out, (B, n, V), f"{label} step"))  # (B, n, V)
        pos, i = pos + n, i + 1
    return torch.cat(outs, dim=1), state  # (B, T, V)


def _first_over(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor) -> str:
    per_pos = (got - ref).abs().nan_to_num(nan=math.inf).amax(dim=(0, 2)) / scale  # (T,)
    bad = (per_pos > INCREMENTAL_TOL).nonzero()  # (k, 1)
    return f", first over tolerance at position {int(bad[0, 0])}" if len(bad) else ""


def check_incremental(ctx: CheckContext) -> CheckResult:
    """``init_state``/``step`` fed 1, 3, 7, 64 tokens at a time (and a mixed schedule)
    reproduce the parallel logits at T = 320 (eval mode, batch 2); stepping twice from one
    saved state gives the same logits (``step`` must not mutate the state it was given).
    Then each layer type's bare mixer at the experiment's lengths (``decode_at_lengths``).
    """
    name = "incremental_equals_parallel"
    if ctx.variant.decode == "none":
        return CheckResult(
            name, "skip", None, INCREMENTAL_TOL, "variant declares decode='none' (no incremental decoding)"
        )
    T = min(INCREMENTAL_T, ctx.config.context)
    worst, where, notes, rules = ctx.reuse.get(("incremental", "fixed"), lambda: _fixed_incremental(ctx, T))
    probed, at, skipped = decode_at_lengths(ctx)
    if is_worse(probed, worst):
        worst, where = probed, at
    lengths = (
        f"; bare mixers stepped at the experiment lengths T={'/'.join(map(str, ctx.lengths))}, every position"
        + (f" ({'; '.join(skipped)})" if skipped else "")
        if ctx.lengths
        else ""
    )
    detail = (
        "".join(f"{r}; " for r in rules)
        + f"max |step logits - forward logits| / max |logits| = {fmt(worst)} at T={T}"
        + (f", worst at {where}" if where else "")
        + lengths
        + "".join(f"; {n}" for n in notes)
    )
    return verdict(name, worst, INCREMENTAL_TOL, detail)


def _fixed_incremental(ctx: CheckContext, T: int) -> tuple[float, str, list[str], list[str]]:
    """(worst, where, notes, rules broken) of each model at T: every schedule, then stepping
    twice from one saved state."""
    V = ctx.config.vocab_size
    schedules: list[tuple[str, tuple[int, ...]]] = [(f"chunks of {n}", (n,)) for n in CHUNK_SIZES]
    schedules.append(("mixed chunks " + "/".join(map(str, MIXED_SCHEDULE)), MIXED_SCHEDULE))
    worst, where, notes, rules = 0.0, "", [], []
    for label, model in models(ctx):
        model.eval()
        idx = tokens(ctx, BATCH, T, offset=5)  # (B, T)
        with torch.no_grad():
            ref = logits_of(model(idx), (BATCH, T, V), f"{label} forward")  # (B, T, V)
            scale = ref.abs().max()

            def fresh(model: Any = model) -> Any:  # this iteration's model, bound now
                return model.init_state(BATCH, T, device=ctx.device, dtype=torch.float32)

            try:
                fresh()
            except NotImplementedError:
                if label == "backbone":
                    raise
                notes.append(f"{label} has no init_state/step: checked the backbone only")
                continue
            for sched, sizes in schedules:
                got, _ = _step_through(model, idx, sizes, fresh(), label, V)  # (B, T, V)
                dev = rel_dev(got, ref, scale)
                if is_worse(dev, worst):
                    worst, where = dev, f"{label}, {sched}{_first_over(got, ref, scale)}"
            devs, rule, P = _branch(model, idx, ref, scale, fresh(), label)
            rules += [rule] if rule else []
            for dev in devs:
                if is_worse(dev, worst):
                    worst, where = dev, f"{label}, stepping twice from the state saved at {P}"
    return worst, where, notes, rules


def _branch(
    model: LanguageModel, idx: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, state: Any, label: str
) -> tuple[tuple[float, float], str, int]:
    """The same saved state (after P = T // 2 tokens) stepped twice must give the same logits,
    equal to the forward's: ((twice apart, against the forward), the rule broken or "", P)."""
    P, V = idx.shape[1] // 2, ref.shape[-1]
    _, saved = _step_through(model, idx[:, :P], (64,), state, label, V)
    kept = _snapshot(saved)
    first, _ = _step_through(model, idx[:, P : P + 7], (7,), saved, label, V)  # (B, 7, V)
    changed = _changed(kept, saved)
    again, _ = _step_through(model, idx[:, P : P + 7], (7,), saved, label, V)  # (B, 7, V)
    branch = rel_dev(again, first, scale)
    rule = "" if branch <= INCREMENTAL_TOL else _branch_rule(label, P, branch, changed)  # NaN breaks it
    return (branch, rel_dev(first, ref[:, P : P + 7], scale)), rule, P


def _snapshot(state: Any) -> list[Any]:
    """Copies of a decode state's leaves (tensors cloned), to see whether ``step`` changed it."""
    if isinstance(state, torch.Tensor):
        return [state.detach().clone()]
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return [x for f in dataclasses.fields(state) for x in _snapshot(getattr(state, f.name))]
    if isinstance(state, dict):
        return [x for v in state.values() for x in _snapshot(v)]
    if isinstance(state, (tuple, list)):
        return [x for v in state for x in _snapshot(v)]
    return [copy.copy(state)]


def _changed(kept: list[Any], state: Any) -> bool:
    now = _snapshot(state)
    if len(now) != len(kept):
        return True
    for a, b in zip(kept, now, strict=True):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return True
        if isinstance(a, torch.Tensor):
            same = (
                a.shape == b.shape
                and a.dtype == b.dtype
                and (
                    torch.equal(a, b)
                    or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
                )
            )
        else:
            try:
                same = bool(a == b)
            except Exception:  # a leaf without a plain equality: not ours to judge
                same = True
        if not same:
            return True
    return False


def _branch_rule(label: str, P: int, dev: float, changed: bool) -> str:
    """The rule a failed branch (one saved state stepped twice) breaks, named."""
    seen = f"{label}: stepping twice from the state saved at {P} gave logits {fmt(dev)} apart"
    if changed:
        return (
            f"step modified the state it was given ({seen}, and the first step changed that state's "
            "values in place); step must leave its input state as it was and return a new one "
            "(e.g. `total + s`, not `total.add_(s)` or `total[:] = ...`)"
        )
    return (
        f"step's result depends on more than the state it was given ({seen}, the state unchanged): "
        "keep every running value in the state object, none on the module"
    )


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _unregistered(model: nn.Module) -> list[str]:
    """Tensor attributes that are neither parameters nor buffers (invisible to .to(), counts)."""
    found = []
    for mod_name, module in model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                found.append(f"{mod_name}.{attr}" if mod_name else attr)
    return found


def _parameter_facts(ctx: CheckContext, fails: list[str], notes: list[str]) -> None:
    """Measured parameter counts; the backbone's count must equal the sum of its parts."""
    cfg = ctx.config
    built = models(ctx)
    backbone = built[0][1]
    per_layer = [_n_params(build_mixer(ctx, i)) for i in range(cfg.n_layer)]
    base = _n_params(Backbone(cfg, lambda c, i: nn.Identity()))
    measured = _n_params(backbone)
    parts = " + ".join(f"{n:,}" for n in per_layer)
    notes.append(f"params: backbone {measured:,} (mixers {parts})")
    if measured != base + sum(per_layer):
        fails.append(
            f"backbone holds {measured:,} parameters, its parts {base + sum(per_layer):,}"
            ": parameters shared between layers or created lazily"
        )
    for label, model in built:
        if label != "backbone":
            notes.append(f"{label} {_n_params(model):,}")
        stray = _unregistered(model)
        if stray:
            fails.append(
                f"{label} holds tensors that are not parameters or buffers (not counted, "
                f"not moved by .to(), not saved): {', '.join(stray[:5])}"
            )


def _state_facts(ctx: CheckContext, fails: list[str], notes: list[str]) -> float | None:
    """state_numel after init_state(1, T) and T stepped tokens vs the declared state_size."""
    v, cfg = ctx.variant, ctx.config
    if v.state_size is None:
        notes.append("state_size not declared")
        return None
    if v.decode == "none":
        notes.append("state_size declared but decode='none': not measurable")
        return None
    worst, measured_at = 0.0, []
    for layer in range(cfg.n_layer):
        mixer = build_mixer(ctx, layer).eval()
        for T in (min(T, cfg.context) for T in STATE_LENGTHS):
            state = decoding(mixer).init_state(1, T, device=ctx.device, dtype=torch.float32)
            x = normal(ctx, 1, T, cfg.d_model)  # (1, T, D)
            pos, i = 0, 0
            with torch.no_grad():
                while pos < T:
                    n = min((1, 7, 64)[i % 3], T - pos)
                    y, state = decoding(mixer).step(x[:, pos : pos + n], state)  # (1, n, D)
                    if not isinstance(y, torch.Tensor) or y.shape != (1, n, cfg.d_model):
                        raise ContractError(
                            f"mixer step returned {getattr(y, 'shape', type(y))} for input (1, {n}, {cfg.d_model})"
                        )
                    pos, i = pos + n, i + 1
            measured = state_numel(state)
            declared = v.state_size(cfg, layer, T)
            if not isinstance(declared, numbers.Integral):
                fails.append(f"state_size(config, {layer}, {T}) returned {declared!r}, not an int")
                return math.nan
            measured_at.append(f"L{layer}/T={T}: {measured:,}")
            worst = max(worst, abs(measured - int(declared)))
            if measured != declared:
                fails.append(
                    f"layer {layer}, T={T}: state holds {measured:,} elements, "
                    f"state_size declares {int(declared):,} ({_factor(int(declared), measured)})"
                )
    notes.append("state " + ", ".join(measured_at))
    return worst


def _factor(declared: int, measured: int) -> str:
    """How far a declared state size is off, as a factor: '4x overstated', '2x understated'."""
    if measured <= 0 or declared <= 0:
        return "declared or held size is zero"
    ratio = declared / measured
    return f"{ratio:.3g}x overstated" if ratio > 1 else f"{1 / ratio:.3g}x understated"


def _flops_facts(ctx: CheckContext, fails: list[str], notes: list[str]) -> None:
    fn, cfg = ctx.variant.flops_per_token, ctx.config
    if fn is None:
        notes.append("flops_per_token not declared")
        return
    for layer in range(cfg.n_layer):
        for T in (1, INCREMENTAL_T, ctx.long_T):
            value = fn(cfg, layer, T)
            if not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
                fails.append(f"flops_per_token(config, {layer}, {T}) = {value!r}, expected a finite positive number")
                return
    notes.append(f"flops/token L0 T={INCREMENTAL_T}: {float(fn(cfg, 0, INCREMENTAL_T)):.3g}")


def _aux_facts(ctx: CheckContext, fails: list[str], notes: list[str]) -> None:
    """``aux_loss`` is declared exactly when some layer returns auxiliary losses in training."""
    config = ctx.config.replace(dropout=0.0)
    layers = []
    for layer in range(config.n_layer):
        mixer = build_mixer(ctx, layer, config).train()
        with torch.no_grad():
            out = mixer(normal(ctx, 1, 16, config.d_model))  # (1, 16, D) or MixerOutput
        if isinstance(out, MixerOutput) and out.aux:
            layers.append(str(layer))
    if bool(layers) != ctx.variant.aux_loss:
        found = f"layers {', '.join(layers)} return" if layers else "no layer returns"
        fails.append(f"aux_loss={ctx.variant.aux_loss} declared, but {found} auxiliary losses in training")
    elif layers:
        notes.append(f"aux losses from layers {', '.join(layers)}")


def check_declared_facts(ctx: CheckContext) -> CheckResult:
    """Declared state size (exact), flops_per_token (finite, positive), aux_loss (matches
    what the mixers return in training); parameter counts measured and accounted for."""
    fails: list[str] = []
    notes: list[str] = []
    _parameter_facts(ctx, fails, notes)
    worst = _state_facts(ctx, fails, notes)
    _flops_facts(ctx, fails, notes)
    _aux_facts(ctx, fails, notes)
    return CheckResult("declared_facts", "fail" if fails else "pass", worst, FACTS_TOL, "; ".join(fails + notes))
