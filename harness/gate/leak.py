"""No-future-leak checks of the trust gate: outputs (forward) and gradients (backward).

Both run at fixed short lengths, and then once more at each length the experiment runs the
variant at (``CheckContext.lengths``: its training length, the longest it evaluates or times;
issue 57: a mixer that leaks only past T = 400 passed the fixed lengths): one probe per layer
type's bare mixer, batch 1, cut at two late positions inside any 64-token chunk. A length the
mixer cannot run at (out of memory, a declared limit) is named and not judged: no number is
recorded there either.
"""

from __future__ import annotations

import torch

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
    mixer_y,
    models,
    normal,
    rel_dev,
    tokens,
    verdict,
)


def positions(T: int) -> list[int]:
    """Cut points t (0 <= t <= T-2): the start, thirds, the middle and the end."""
    return sorted({t for t in (0, 1, T // 3, T // 2, (2 * T) // 3, T - 2) if 0 <= t <= T - 2})


def _causal_note(ctx: CheckContext) -> str:
    return "" if ctx.variant.causal else " (variant declares causal=False)"


def probe_cuts(T: int) -> tuple[int, ...]:
    """Two late cut points t of a length-T probe: two thirds in and the end, neither on a
    multiple of 64 (a chunk boundary) where T allows."""
    cuts = {t if t % 64 else t + 1 for t in ((2 * T) // 3, T - 2)}
    return tuple(sorted(t for t in cuts if 0 <= t <= T - 2))


def _probe_mixer(ctx: CheckContext, layer: int, T: int):
    """One layer's bare mixer for a length-T probe: context widened to T, dropout 0."""
    config = ctx.config.replace(context=max(ctx.config.context, T), dropout=0.0)
    return build_mixer(ctx, layer, config), config


def _not_run(T: int, exc: Exception) -> str:
    msg = " ".join(str(exc).split())
    return f"T={T} not run ({type(exc).__name__}: {msg[:120]}{'...' if len(msg) > 120 else ''})"


def length_probe_forward(ctx: CheckContext) -> tuple[float, str, int, list[str]]:
    """(worst relative change of outputs at <= t, where, cases, lengths not run) over
    ``ctx.lengths``: each layer type's bare mixer in eval mode on one sequence of T tokens,
    every position after t perturbed, for t in ``probe_cuts(T)``."""
    worst, where, n_cases, skipped = 0.0, "", 0, []
    for T in ctx.lengths:
        for layer, label in layer_types(ctx):
            try:
                mixer, config = _probe_mixer(ctx, layer, T)
                mixer.eval()
                x = normal(ctx, 1, T, config.d_model, offset=41)  # (1, T, D)
                with torch.no_grad():
                    ref = mixer_y(mixer(x)).float()  # (1, T, D)
                    for t in probe_cuts(T):
                        bumped = x.clone()  # (1, T, D)
                        bumped[:, t + 1 :] += normal(ctx, 1, T, config.d_model, offset=43 + t)[:, t + 1 :]
                        got = mixer_y(mixer(bumped)).float()  # (1, T, D)
                        dev = rel_dev(got[:, : t + 1], ref[:, : t + 1], ref[:, : t + 1].abs().max())
                        n_cases += 1
                        if is_worse(dev, worst):
                            worst, where = (
                                dev,
                                f"{_layer(ctx, layer, label)}T={T} (experiment length), perturbed after t={t}",
                            )
            except ContractError:
                raise
            except Exception as exc:  # cannot run at T: named, not judged
                skipped.append(_not_run(T, exc))
                break
    return worst, where, n_cases, list(dict.fromkeys(skipped))


def length_probe_backward(ctx: CheckContext) -> tuple[float, str, list[str]]:
    """(max |d y[<=t] / d x[>t]|, where, lengths not run) over ``ctx.lengths``: each layer type's
    bare mixer in train mode (dropout 0) on one sequence of T tokens, one backward per cut t of a
    random cotangent on every output at <= t; the gradient reaching any later input must be 0."""
    worst, where, skipped = 0.0, "", []
    for T in ctx.lengths:
        for layer, label in layer_types(ctx):
            try:
                mixer, config = _probe_mixer(ctx, layer, T)
                mixer.train()
                x = normal(ctx, 1, T, config.d_model, offset=47).requires_grad_()  # (1, T, D)
                y = mixer_y(mixer(x))  # (1, T, D)
                r = normal(ctx, 1, T, config.d_model, offset=53)  # (1, T, D) cotangent
                for t in probe_cuts(T):
                    (g,) = torch.autograd.grad(
                        y[:, : t + 1], x, grad_outputs=r[:, : t + 1], retain_graph=True, allow_unused=True
                    )
                    future = 0.0 if g is None else float(g[:, t + 1 :].abs().max())  # () grad reaching positions > t
                    if is_worse(future, worst):
                        worst, where = future, f"{_layer(ctx, layer, label)}T={T} (experiment length), t={t}"
            except ContractError:
                raise
            except Exception as exc:  # cannot run at T: named, not judged
                skipped.append(_not_run(T, exc))
                break
    return worst, where, list(dict.fromkeys(skipped))


def _layer(ctx: CheckContext, layer: int, label: str) -> str:
    return f"layer {layer} ({label}), " if getattr(ctx.variant, "parts", ()) else f"layer {layer}, "


def _lengths_note(ctx: CheckContext, skipped: list[str]) -> str:
    if not ctx.lengths:
        return ""
    ran = "/".join(map(str, ctx.lengths))
    return f"; experiment lengths T={ran} probed" + (f" ({'; '.join(skipped)})" if skipped else "")


def check_forward_leak(ctx: CheckContext) -> CheckResult:
    """Perturb tokens after t, and cut the sequence after t: logits at <= t must not move.

    Runs on the shared backbone (and the variant's own model) in eval mode, batch 2, over
    ``LEAK_LENGTHS`` and several t. The cut (prefix) test also catches mixers that read the
    sequence length, which a token perturbation cannot reveal.
    """
    name = "no_future_leak_forward"
    V = ctx.config.vocab_size
    worst, where, n_cases = 0.0, "", 0
    for label, model in models(ctx):
        model.eval()
        what = f"{label} forward"
        for T in (T for T in LEAK_LENGTHS if ctx.config.context >= T):
            idx = tokens(ctx, 2, T)  # (B, T)
            with torch.no_grad():
                ref = logits_of(model(idx), (2, T, V), what)  # (B, T, V)
                scale = ref.abs().max()
                for t in positions(T):
                    shift = tokens(ctx, 2, T, offset=t + 1) % (V - 1) + 1  # (B, T) in [1, V)
                    bumped = idx.clone()  # (B, T)
                    bumped[:, t + 1 :] = (idx + shift)[:, t + 1 :] % V  # every later token differs
                    got = logits_of(model(bumped), (2, T, V), what)  # (B, T, V)
                    cut = logits_of(model(idx[:, : t + 1]), (2, t + 1, V), what)  # (B, t+1, V)
                    for kind, out in (("perturbed after", got[:, : t + 1]), ("cut after", cut)):
                        dev = rel_dev(out, ref[:, : t + 1], scale)
                        n_cases += 1
                        if is_worse(dev, worst):
                            worst, where = dev, f"{label}, T={T}, {kind} t={t}"
    probed, at, cases, skipped = length_probe_forward(ctx)
    n_cases += cases
    if is_worse(probed, worst):
        worst, where = probed, at
    detail = (
        f"max |d logits[<=t]| / max |logits| = {fmt(worst)} over {n_cases} cases"
        + (f", worst at {where}" if where else "")
        + _lengths_note(ctx, skipped)
        + _causal_note(ctx)
    )
    return verdict(name, worst, LEAK_FORWARD_TOL, detail)


def check_backward_leak(ctx: CheckContext) -> CheckResult:
    """d y[:, t] / d x[:, s] must be exactly zero for s > t, on each layer's bare mixer.

    The input is a float tensor requiring grad, so the gradient is defined at every
    position; a random cotangent on y[:, t] makes an accidental cancellation unlikely.
    Both train (dropout 0) and eval modes: a mask applied in one mode only is caught.
    """
    name = "no_future_leak_backward"
    config = ctx.config.replace(dropout=0.0)
    worst, where, dead = 0.0, "", 0
    for layer in range(config.n_layer):
        mixer = build_mixer(ctx, layer, config)
        for mode in ("train", "eval"):
            mixer.train(mode == "train")
            for T in BACKWARD_LENGTHS:
                x = normal(ctx, 2, T, config.d_model).requires_grad_()  # (B, T, D)
                y = mixer_y(mixer(x))  # (B, T, D)
                r = normal(ctx, 2, T, config.d_model, offset=1)  # (B, T, D) cotangent
                for t in positions(T):
                    (g,) = torch.autograd.grad(y[:, t], x, grad_outputs=r[:, t], retain_graph=True, allow_unused=True)
                    if g is None:  # y[:, t] does not depend on x at all
                        dead += 1
                        continue
                    future = float(g[:, t + 1 :].abs().max())  # () grad reaching positions > t
                    dead += int(float(g[:, : t + 1].abs().max()) == 0.0)
                    if is_worse(future, worst):
                        worst, where = future, f"layer {layer}, {mode}, T={T}, t={t}"
    probed, at, skipped = length_probe_backward(ctx)
    if is_worse(probed, worst):
        worst, where = probed, at
    detail = (
        f"max |d y[t] / d x[>t]| = {fmt(worst)}"
        + (f", worst at {where}" if where else "")
        + (f"; note: {dead} outputs had zero gradient w.r.t. every input" if dead else "")
        + _lengths_note(ctx, skipped)
        + _causal_note(ctx)
    )
    return verdict(name, worst, LEAK_BACKWARD_TOL, detail)
