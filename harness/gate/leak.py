"""No-future-leak checks of the trust gate: outputs (forward) and gradients (backward)."""

from __future__ import annotations

import torch

from attnbench.gate.common import (
    BACKWARD_LENGTHS,
    LEAK_BACKWARD_TOL,
    LEAK_FORWARD_TOL,
    LEAK_LENGTHS,
    CheckContext,
    CheckResult,
    build_mixer,
    fmt,
    is_worse,
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
    detail = (
        f"max |d logits[<=t]| / max |logits| = {fmt(worst)} over {n_cases} cases"
        + (f", worst at {where}" if where else "")
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
    detail = (
        f"max |d y[t] / d x[>t]| = {fmt(worst)}"
        + (f", worst at {where}" if where else "")
        + (f"; note: {dead} outputs had zero gradient w.r.t. every input" if dead else "")
        + _causal_note(ctx)
    )
    return verdict(name, worst, LEAK_BACKWARD_TOL, detail)
