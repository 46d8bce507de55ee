"""Decode at the experiment's lengths (issue 65): each layer type's bare mixer stepped through a
whole sequence of each length in ``CheckContext.lengths`` (its training length, the longest it
evaluates, generates or times), fed in the mixed schedule 5/1/64/2/33 (single tokens and prompts
of several sizes, chunk boundaries at irregular positions), against its parallel forward at
every position. A step path that goes wrong only past the fixed check's 320 tokens is caught at
the length where a suite decodes. A length the mixer cannot run at is named, not judged.

    worst, where, skipped = decode_at_lengths(ctx)
"""

from __future__ import annotations

from typing import Any

import torch

from attnbench.contract.variant import decoding
from attnbench.gate.common import (
    INCREMENTAL_TOL,
    MIXED_SCHEDULE,
    CheckContext,
    ContractError,
    build_mixer,
    is_worse,
    layer_types,
    mixer_y,
    normal,
)


def _stepped(mixer: Any, x: torch.Tensor) -> torch.Tensor:
    """x (1, T, D) through ``step`` in chunks cycling through ``MIXED_SCHEDULE``: (1, T, D)."""
    T, steps = x.shape[1], decoding(mixer)
    state = steps.init_state(1, T, device=x.device, dtype=torch.float32)
    outs, pos, i = [], 0, 0
    while pos < T:
        n = min(MIXED_SCHEDULE[i % len(MIXED_SCHEDULE)], T - pos)
        y, state = steps.step(x[:, pos : pos + n], state)  # (1, n, D)
        y = mixer_y(y)
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != (1, n, x.shape[2]):
            raise ContractError(f"mixer step returned {getattr(y, 'shape', type(y))} for input (1, {n}, {x.shape[2]})")
        outs.append(y.float())
        pos, i = pos + n, i + 1
    return torch.cat(outs, dim=1)  # (1, T, D)


def _one(ctx: CheckContext, layer: int, T: int) -> tuple[float, int | None]:
    """(max |step y - forward y| / max |y|, first position over INCREMENTAL_TOL) at length T."""
    config = ctx.config.replace(context=max(ctx.config.context, T), dropout=0.0)
    mixer = build_mixer(ctx, layer, config).eval()
    x = normal(ctx, 1, T, config.d_model, offset=61)  # (1, T, D)
    with torch.no_grad():
        ref = mixer_y(mixer(x)).float()  # (1, T, D)
        got = _stepped(mixer, x)  # (1, T, D)
    scale = max(float(ref.abs().max()), 1e-30)
    per_pos = (got - ref).abs().amax(dim=(0, 2)).nan_to_num(nan=float("inf")) / scale  # (T,)
    over = (per_pos > INCREMENTAL_TOL).nonzero()  # (k, 1)
    return float(per_pos.max()), (int(over[0, 0]) if len(over) else None)


def decode_at_lengths(ctx: CheckContext) -> tuple[float, str, list[str]]:
    """(worst relative deviation, where, lengths not run) over ``ctx.lengths`` and layer types;
    each length decoded once per process (``CheckContext.reuse``)."""
    worst, where, skipped = 0.0, "", []
    for T in ctx.lengths:
        dev, at, not_run = ctx.reuse.get(("decode", T), lambda T=T: _at_length(ctx, T), keep=lambda p: not p[2])
        skipped += not_run
        if is_worse(dev, worst):
            worst, where = dev, at
    return worst, where, list(dict.fromkeys(skipped))


def _at_length(ctx: CheckContext, T: int) -> tuple[float, str, list[str]]:
    """``decode_at_lengths`` at one length T: (worst, where, [T not run] or [])."""
    worst, where = 0.0, ""
    for layer, label in layer_types(ctx):
        try:
            dev, first = _one(ctx, layer, T)
        except ContractError:
            raise
        except Exception as exc:  # cannot run at T: named, not judged
            msg = " ".join(str(exc).split())
            return worst, where, [f"T={T} not run ({type(exc).__name__}: {msg[:120]})"]
        if is_worse(dev, worst):
            kind = f" ({label})" if getattr(ctx.variant, "parts", ()) else ""
            worst, where = (
                dev,
                (
                    f"layer {layer}{kind}, T={T} (experiment length), steps of "
                    + "/".join(map(str, MIXED_SCHEDULE))
                    + (f", first over tolerance at position {first}" if first is not None else "")
                ),
            )
    return worst, where, []
