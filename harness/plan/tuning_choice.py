"""Which tuning point a rung ranks first, from its seeds' validation outcomes.

Each seed of a point gets a score, lower is better: its validation loss, or for the ``accuracy``
criterion its validation accuracy (negated) where that seed is beyond its measured null (the
one-sided exact binomial test of attnbench.stats.learned on its validation answers), else its loss.
Points whose every seed is beyond the null rank first, by mean accuracy; the rest by mean loss
(a point below its null has learned nothing an accuracy could rank).

A near-tie goes to the rate whose seeds agree, then to the lower rate: the points whose mean lies
within the best point's own seed spread (max - min over its tuning seeds) of the best mean are
near-tied with it; among those whose seeds agree about as well as the best's (spread at most twice
the best's), the lowest learning rate is chosen. So a rate does not win by a margin its own seeds do
not support, and a rate that throws some seeds into a slow mode (a wide spread) is never preferred
for being lower. With one tuning seed there is no spread and the best mean wins (ties: the earlier
point)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnbench.plan.grid_window import finite_number
from attnbench.stats.learned import seed_learned


def beyond_null(summary: Mapping[str, Any]) -> bool:
    """Whether a run's validation accuracy is beyond its validation null (exact binomial test on
    its validation answers where their count is stored)."""
    acc, null = finite_number(summary.get("val_accuracy")), finite_number(summary.get("val_guess_accuracy"))
    if acc is None or null is None:
        return False
    return seed_learned(acc, null, True, finite_number(summary.get("val_answers_total")))


@dataclass(frozen=True)
class PointScore:
    """One point's seeds, scored: ``learned`` (accuracy criterion: every seed beyond its null),
    the per-seed scores (lower is better; inf for a failed or diverged seed)."""

    point: tuple[tuple[str, Any], ...]
    learned: bool
    scores: tuple[float, ...]
    losses: tuple[float, ...] = ()  # validation losses (the accuracy criterion's tie-break)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else math.inf

    @property
    def spread(self) -> float:
        finite = [s for s in self.scores if math.isfinite(s)]
        return max(finite) - min(finite) if len(finite) == len(self.scores) and finite else math.inf

    @property
    def rank_key(self) -> tuple[int, float, float]:
        loss = statistics.fmean(self.losses) if self.losses else math.inf
        return (0 if self.learned else 1, self.mean, loss)

    def lr(self) -> float:
        v = dict(self.point).get("lr")
        return float(v) if isinstance(v, (int, float)) else math.inf


def score_point(point: tuple[tuple[str, Any], ...], outcomes: Sequence[Any], criterion: str) -> PointScore:
    """A point's scores from its seeds' (status, summary) outcomes."""
    done = [o[1] for o in outcomes if o is not None and o[0] == "done"]
    learned = criterion == "accuracy" and len(done) == len(outcomes) > 0 and all(beyond_null(s) for s in done)
    scores, losses = [], []
    for o in outcomes:
        summary = o[1] if o is not None and o[0] == "done" else {}
        loss = finite_number(summary.get("val_loss"))
        value = finite_number(summary.get("val_accuracy")) if learned else loss
        scores.append(math.inf if value is None else (-value if learned else value))
        losses.append(math.inf if loss is None else loss)
    return PointScore(point, learned, tuple(scores), tuple(losses))


def rank(points: Sequence[PointScore]) -> list[PointScore]:
    """The points best first: by class (beyond the null first) and mean, then the near-tie rule
    moves the lowest rate among the points tied with the best to the front."""
    ordered = sorted(points, key=lambda p: p.rank_key)  # stable: on an exact tie the earlier point leads
    if not ordered or not math.isfinite(ordered[0].mean):
        return ordered
    best = ordered[0]
    tied = [
        p
        for p in ordered
        if p.learned == best.learned and p.mean - best.mean <= best.spread and p.spread <= 2 * best.spread
    ]
    chosen = min(tied, key=lambda p: (p.lr(), ordered.index(p)))
    return [chosen, *(p for p in ordered if p is not chosen)]


def near_tie_text(points: Sequence[PointScore]) -> str | None:
    """Why the chosen point is not the best mean, in words (None where it is)."""
    ordered = sorted(points, key=lambda p: p.rank_key)
    chosen = rank(points)
    if not ordered or chosen[0] is ordered[0]:
        return None
    b, c = ordered[0], chosen[0]
    return (
        f"lr {c.lr():g} chosen over lr {b.lr():g} (mean {c.mean:.4g} against {b.mean:.4g}): within the best "
        f"point's seed spread ({b.spread:.3g}), with seeds that agree as well ({c.spread:.3g}), the lower rate"
    )
