"""No-future-leak checks of the trust gate: outputs (forward) and gradients (backward).

Every cut t (outputs at <= t against inputs after t) at the fixed short lengths, one batch row
per cut (``causal``); at each length the experiment runs the variant at (``CheckContext.lengths``:
its training length, the longest it evaluates or times), each layer type's bare mixer at every
cut up to ``positions.EVERY_UP_TO`` tokens, above at every chunk edge, power of two +- 1 and
random cuts (``positions.cut_points``; issue 65: a leak between a few probe cuts passed). A
length the mixer cannot run at (out of memory, a declared limit) is named and not judged.
"""

from __future__ import annotations

import torch
from torch import nn

from attnbench.gate.causal import Probe, backward_cuts, forward_cuts
from attnbench.gate.common import (
    BACKWARD_LENGTHS,
    LEAK_BACKWARD_TOL,
    LEAK_FORWARD_TOL,
    LEAK_LENGTHS,
    CheckContext,
    CheckResult,
    ContractError,
    build_mixer,
    fmt,
    is_worse,
    layer_types,
    logits_of,
    normal,
    tokens,
    verdict,
)
from attnbench.gate.common import models as built_models
from attnbench.gate.positions import chunk_sizes, cut_points, describe


def prefix_cuts(T: int) -> list[int]:
    """Cut points of the prefix (truncation) test: the start, thirds, the middle, the end and
    the 64-token chunk edges below T."""
    edges = {e for m in range(64, T, 64) for e in (m - 1, m)}
    return sorted({t for t in (0, 1, T // 3, T // 2, (2 * T) // 3, T - 2, *edges) if 0 <= t <= T - 2})


def _causal_note(ctx: CheckContext) -> str:
    return "" if ctx.variant.causal else " (variant declares causal=False)"


def _probe_mixer(ctx: CheckContext, layer: int, T: int) -> nn.Module:
    """One layer's bare mixer for a length-T probe: context widened to T, dropout 0."""
    return build_mixer(ctx, layer, ctx.config.replace(context=max(ctx.config.context, T), dropout=0.0))


def _not_run(T: int, exc: Exception) -> str:
    msg = " ".join(str(exc).split())
    return f"T={T} not run ({type(exc).__name__}: {msg[:120]}{'...' if len(msg) > 120 else ''})"


def _layer(ctx: CheckContext, layer: int, label: str) -> str:
    return f"layer {layer} ({label}), " if getattr(ctx.variant, "parts", ()) else f"layer {layer}, "


def _cuts(ctx: CheckContext, T: int) -> tuple[int, ...]:
    return cut_points(T, chunk_sizes(ctx.config.options), ctx.seed)


def _at(probe: Probe, kind: str) -> str:
    first = "" if probe.first is None else f", first {kind} position {probe.first}"
    return f"t={probe.cut}{first}"


def length_probes(ctx: CheckContext, backward: bool) -> tuple[float, str, list[str]]:
    """(worst figure, where, lengths not run) over ``ctx.lengths``: each layer type's bare
    mixer on one sequence of T tokens at ``cut_points(T)``; forward in eval mode (relative
    change of outputs at <= t), backward in train mode (gradient reaching inputs after t).
    Each length is probed once per process (``CheckContext.reuse``)."""
    worst, where, skipped = 0.0, "", []
    for T in ctx.lengths:
        part = ("leak_backward" if backward else "leak_forward", T)
        dev, at, not_run = ctx.reuse.get(part, lambda T=T: _length_probe(ctx, T, backward), keep=lambda p: not p[2])
        skipped += not_run
        if is_worse(dev, worst):
            worst, where = dev, at
    return worst, where, list(dict.fromkeys(skipped))


def _length_probe(ctx: CheckContext, T: int, backward: bool) -> tuple[float, str, list[str]]:
    """``length_probes`` at one length T: (worst figure, where, [T not run] or [])."""
    worst, where = 0.0, ""
    for layer, label in layer_types(ctx):
        try:
            mixer = _probe_mixer(ctx, layer, T).train(backward)
            x = normal(ctx, 1, T, ctx.config.d_model, offset=41)  # (1, T, D)
            r = normal(ctx, 1, T, ctx.config.d_model, offset=53)  # (1, T, D) noise or cotangent
            cuts = _cuts(ctx, T)
            probe = backward_cuts(mixer, x, cuts, r) if backward else forward_cuts(mixer, x, cuts, r, LEAK_FORWARD_TOL)
        except ContractError:
            raise
        except Exception as exc:  # cannot run at T: named, not judged
            return worst, where, [_not_run(T, exc)]
        if is_worse(probe.figure, worst):
            kind = "reached input" if backward else "leaking output"
            worst, where = probe.figure, f"{_layer(ctx, layer, label)}T={T} (experiment length), {_at(probe, kind)}"
    return worst, where, []


def _lengths_note(ctx: CheckContext, skipped: list[str]) -> str:
    if not ctx.lengths:
        return ""
    ran = "/".join(map(str, ctx.lengths))
    how = "; ".join(describe(T, len(_cuts(ctx, T))) for T in ctx.lengths)
    return f"; experiment lengths T={ran} probed ({how})" + (f" ({'; '.join(skipped)})" if skipped else "")


def _model_cuts(model: nn.Module, idx: torch.Tensor, V: int, what: str, ctx: CheckContext) -> tuple[float, str]:
    """Every cut of one sequence idx (1, T) at once: row b has every token after t_b changed;
    logits at <= t_b must not move (relative to max |logits|). Then the prefix (truncation) test."""
    T = idx.shape[1]
    cuts = tuple(range(T - 1))
    t = torch.tensor(cuts, device=idx.device)  # (n,)
    later = torch.arange(T, device=idx.device)[None, :] > t[:, None]  # (n, T)
    shift = tokens(ctx, len(cuts), T, offset=1) % (V - 1) + 1  # (n, T) in [1, V)
    rows = torch.cat([idx, torch.where(later, (idx + shift) % V, idx)], dim=0)  # (1 + n, T)
    logits = logits_of(model(rows), (1 + len(cuts), T, V), what)  # (1 + n, T, V)
    scale = float(logits[0].abs().max())
    moved = (logits[1:] - logits[:1]).abs().amax(dim=-1).nan_to_num(nan=float("inf")).masked_fill(later, 0.0) / scale
    b = int(moved.amax(dim=-1).argmax())  # the worst cut
    over = (moved[b] > LEAK_FORWARD_TOL).nonzero()  # (k, 1) its moved positions
    worst = Probe(float(moved[b].max()), cuts[b], int(over[0, 0]) if len(over) else None)
    where = f"T={T}, perturbed after {_at(worst, 'leaking output')}"
    for t_cut in prefix_cuts(T):
        cut = logits_of(model(idx[:, : t_cut + 1]), (1, t_cut + 1, V), what)  # (1, t+1, V)
        dev = float((cut - logits[:1, : t_cut + 1]).abs().max()) / scale
        if is_worse(dev, worst.figure):
            worst, where = Probe(dev, t_cut), f"T={T}, cut after t={t_cut}"
    return worst.figure, where


def _fixed_forward(ctx: CheckContext) -> tuple[float, str, int]:
    """(worst, where, cuts tried) of the models at ``LEAK_LENGTHS``, every cut and the prefix cuts."""
    V = ctx.config.vocab_size
    worst, where, n_cases = 0.0, "", 0
    for label, model in built_models(ctx):
        model.eval()
        for T in (T for T in LEAK_LENGTHS if ctx.config.context >= T):
            with torch.no_grad():
                dev, at = _model_cuts(model, tokens(ctx, 1, T), V, f"{label} forward", ctx)
            n_cases += T - 1 + len(prefix_cuts(T))
            if is_worse(dev, worst):
                worst, where = dev, f"{label}, {at}"
    return worst, where, n_cases


def check_forward_leak(ctx: CheckContext) -> CheckResult:
    """Perturb tokens after t, and cut the sequence after t: logits at <= t must not move.

    Runs on the shared backbone (and the variant's own model) in eval mode over
    ``LEAK_LENGTHS``, at every cut t (perturbation) and at the prefix cuts (truncation, which
    also catches a mixer that reads the sequence length); then each layer type's bare mixer at
    the experiment's lengths (``length_probes``).
    """
    worst, where, n_cases = ctx.reuse.get(("leak_forward", "fixed"), lambda: _fixed_forward(ctx))
    probed, at, skipped = length_probes(ctx, backward=False)
    if is_worse(probed, worst):
        worst, where = probed, at
    detail = (
        f"max |d logits[<=t]| / max |logits| = {fmt(worst)} over {n_cases} cuts at T="
        + "/".join(map(str, LEAK_LENGTHS))
        + " (every position)"
        + (f", worst at {where}" if where else "")
        + _lengths_note(ctx, skipped)
        + _causal_note(ctx)
    )
    return verdict("no_future_leak_forward", worst, LEAK_FORWARD_TOL, detail)


def _fixed_backward(ctx: CheckContext) -> tuple[float, str]:
    """(worst, where) of each layer's bare mixer, train and eval mode, every cut of ``BACKWARD_LENGTHS``."""
    config = ctx.config.replace(dropout=0.0)
    worst, where = 0.0, ""
    for layer in range(config.n_layer):
        mixer = build_mixer(ctx, layer, config)
        for mode in ("train", "eval"):
            mixer.train(mode == "train")
            for T in BACKWARD_LENGTHS:
                x = normal(ctx, 1, T, config.d_model)  # (1, T, D)
                r = normal(ctx, 1, T, config.d_model, offset=1)  # (1, T, D) cotangent
                probe = backward_cuts(mixer, x, tuple(range(T - 1)), r)
                if is_worse(probe.figure, worst):
                    worst, where = probe.figure, f"layer {layer}, {mode}, T={T}, {_at(probe, 'reached input')}"
    return worst, where


def check_backward_leak(ctx: CheckContext) -> CheckResult:
    """d y[<=t] / d x[>t] must be exactly zero at every cut t, on each layer's bare mixer.

    The input is a float tensor requiring grad, so the gradient is defined at every
    position; a random cotangent on y[<=t] makes an accidental cancellation unlikely.
    Both train (dropout 0) and eval modes: a mask applied in one mode only is caught.
    """
    worst, where = ctx.reuse.get(("leak_backward", "fixed"), lambda: _fixed_backward(ctx))
    probed, at, skipped = length_probes(ctx, backward=True)
    if is_worse(probed, worst):
        worst, where = probed, at
    detail = (
        f"max |d y[<=t] / d x[>t]| = {fmt(worst)} at every cut t of T="
        + "/".join(map(str, BACKWARD_LENGTHS))
        + (f", worst at {where}" if where else "")
        + _lengths_note(ctx, skipped)
        + _causal_note(ctx)
    )
    return verdict("no_future_leak_backward", worst, LEAK_BACKWARD_TOL, detail)
