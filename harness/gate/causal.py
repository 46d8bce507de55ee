"""Causality of a bare mixer at many cuts at once (issue 65): one batch row per cut t.

Forward: row b holds the sequence with every input after t_b perturbed; its outputs at <= t_b
must equal the unperturbed row's (row 0 of the same batch, so batching itself changes nothing).
Backward: row b holds the sequence unchanged and a random cotangent on its outputs at <= t_b;
the vector-Jacobian product must be exactly 0 at every input after t_b. Rows are independent
(a mixer never mixes batch elements), so one batch tests many cuts; groups keep a batch at
about ``GROUP_TOKENS`` tokens.

    probe = forward_cuts(mixer, x, cuts, noise, tol)   # x (1, T, D) -> Probe(figure, cut, first)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from attnbench.gate.common import is_worse, mixer_y

GROUP_TOKENS = 8192  # tokens per batch of cut rows (T copies of a length-T sequence at T = 90)


@dataclass(frozen=True)
class Probe:
    """The worst cut of a probe: its figure, the cut t, and the first position past tolerance
    (forward: an output at <= t that moved; backward: an input after t that gradient reached)."""

    figure: float = 0.0
    cut: int | None = None
    first: int | None = None

    def worse(self, other: Probe) -> Probe:
        return other if is_worse(other.figure, self.figure) else self


def _groups(cuts: tuple[int, ...], T: int) -> Iterator[tuple[int, ...]]:
    n = max(1, GROUP_TOKENS // max(T, 1))
    for i in range(0, len(cuts), n):
        yield cuts[i : i + n]


def _later(cuts: tuple[int, ...], T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(t (n,), later (n, T)): the cuts and, per cut row, the positions after it."""
    t = torch.tensor(cuts, device=device)  # (n,)
    return t, torch.arange(T, device=device)[None, :] > t[:, None]  # (n, T)


def _first(mask_row: torch.Tensor) -> int | None:
    hits = mask_row.nonzero()  # (k, 1)
    return int(hits[0, 0]) if len(hits) else None


def forward_cuts(mixer: nn.Module, x: torch.Tensor, cuts: tuple[int, ...], noise: torch.Tensor, tol: float) -> Probe:
    """Worst relative change of outputs at <= t (over max |y[<=t]|) when every input after t
    changes by ``noise``; x and noise (1, T, D); the mixer in eval mode."""
    T, worst = x.shape[1], Probe()
    for group in _groups(cuts, T):
        t, later = _later(group, T, x.device)  # (n,), (n, T)
        rows = torch.cat([x, x + noise * later[..., None].to(x.dtype)], dim=0)  # (1 + n, T, D)
        with torch.no_grad():
            y = mixer_y(mixer(rows)).float()  # (1 + n, T, D)
        ref = y[:1]  # (1, T, D) row 0: unperturbed, same batch
        moved = (y[1:] - ref).abs().amax(dim=-1).nan_to_num(nan=math.inf).masked_fill(later, 0.0)  # (n, T)
        scale = ref[0].abs().amax(dim=-1).cummax(dim=0).values[t].clamp_min(1e-30)  # (n,) max |y[<=t]|
        rel = moved / scale[:, None]  # (n, T)
        per_cut = rel.amax(dim=-1)  # (n,)
        b = int(per_cut.argmax())
        worst = worst.worse(Probe(float(per_cut[b]), group[b], _first(rel[b] > tol)))
    return worst


def backward_cuts(mixer: nn.Module, x: torch.Tensor, cuts: tuple[int, ...], cotangent: torch.Tensor) -> Probe:
    """Largest |d (r . y[<=t]) / d x[>t]| over the cuts: a random cotangent r on the outputs at
    <= t, the gradient reaching any later input (must be exactly 0); x, r (1, T, D)."""
    T, worst = x.shape[1], Probe()
    for group in _groups(cuts, T):
        _, later = _later(group, T, x.device)  # (n, T)
        rows = x.detach().expand(len(group), -1, -1).clone().requires_grad_()  # (n, T, D)
        y = mixer_y(mixer(rows))  # (n, T, D)
        r = cotangent.to(y.dtype) * (~later)[..., None].to(y.dtype)  # (n, T, D) outputs at <= t only
        (g,) = torch.autograd.grad(y, rows, grad_outputs=r, allow_unused=True)
        if g is None:  # no output depends on the input at all
            continue
        reached = g.abs().amax(dim=-1).nan_to_num(nan=math.inf).masked_fill(~later, 0.0)  # (n, T)
        per_cut = reached.amax(dim=-1)  # (n,)
        b = int(per_cut.argmax())
        worst = worst.worse(Probe(float(per_cut[b]), group[b], _first(reached[b] > 0)))
    return worst
