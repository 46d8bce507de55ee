"""Null levels a trained model must clear, computed from a cell's data alone (counts, no training).

Text: an evaluation split's cross-entropy under n-gram models fitted on the training split
(unigram add-one; bigram and trigram interpolated Kneser-Ney, Chen & Goodman 1999, discount
n1 / (n1 + 2 n2) per order, the lowest order mixed with uniform), all scoring the split's tokens
from the third on. Tasks: the accuracy of the best guess with no memory of the context's pairs,
declared by the task (``Task.guess_accuracy``) or measured by a majority-answer model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from attnbench.contract.task import IGNORE, Task, TaskBatch

ORDERS = ("unigram", "bigram", "trigram")
SMOOTHING = "unigram add-one; bigram and trigram interpolated Kneser-Ney (discount n1/(n1+2n2) per order)"
MEASURED = "measured: the answer most often seen at each scored position of the training examples"
_TEXT_CACHE: dict[tuple[str, int], dict[str, dict[str, float]]] = {}  # per corpus: its floors per split


@dataclass(frozen=True)
class _Counts:
    """Sorted n-gram keys (ids packed base V) with their counts."""

    keys: np.ndarray  # (K,) int64, sorted
    counts: np.ndarray  # (K,) float64

    @classmethod
    def of(cls, keys: np.ndarray) -> _Counts:
        k, c = np.unique(keys, return_counts=True)
        return cls(k, c.astype(np.float64))

    def __call__(self, query: np.ndarray) -> np.ndarray:
        """Counts of ``query`` keys (0 where unseen)."""
        if len(self.keys) == 0:
            return np.zeros(len(query))
        i = np.minimum(np.searchsorted(self.keys, query), len(self.keys) - 1)  # (Q,)
        return np.where(self.keys[i] == query, self.counts[i], 0.0)


def _discount(counts: np.ndarray) -> float:
    n1, n2 = float(np.sum(counts == 1)), float(np.sum(counts == 2))
    return n1 / (n1 + 2 * n2) if n1 > 0 and n2 > 0 else 0.5


def _level(
    grams: _Counts, history_of: np.ndarray, query: np.ndarray, history: np.ndarray, lower: np.ndarray
) -> np.ndarray:
    """One interpolated Kneser-Ney level: P(w | h) = max(c(hw) - D, 0) / c(h.) + D N1+(h.) / c(h.) P_lower,
    or P_lower where h was never seen. ``grams``: counts of (h, w) types, ``history_of``: their h."""
    D = _discount(grams.counts)
    total = _Counts(*_group_sum(history_of, grams.counts))  # c(h .)
    types = _Counts.of(history_of)  # N1+(h .)
    c_h = total(history)  # (Q,)
    safe = np.maximum(c_h, 1.0)
    p = np.maximum(grams(query) - D, 0.0) / safe + D * types(history) / safe * lower  # (Q,)
    return np.where(c_h > 0, p, lower)


def _group_sum(groups: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keys, inverse = np.unique(groups, return_inverse=True)
    return keys, np.bincount(inverse, weights=values).astype(np.float64)


def ngram_cross_entropy(train: npt.ArrayLike, test: npt.ArrayLike, vocab_size: int) -> dict[str, float]:
    """Nats per token of ``test`` under unigram, bigram and trigram models fitted on ``train``."""
    V = int(vocab_size)
    x, y = np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)
    if len(x) < 3 or len(y) < 3:
        raise ValueError("n-gram floors need at least 3 training and 3 test tokens")
    u, v, w = y[:-2], y[1:-1], y[2:]  # (Q,) each: the scored token w, its history (u, v)
    unigram = (_Counts.of(x)(w) + 1.0) / (len(x) + V)  # add-one
    bi_types = _Counts.of(x[:-1] * V + x[1:])  # raw bigram counts c(v w)
    tri_types = _Counts.of((x[:-2] * V + x[1:-1]) * V + x[2:])  # raw trigram counts c(u v w)
    # continuation unigram N1+(. w) over bigram types, interpolated with uniform
    cont1 = _Counts.of(bi_types.keys % V)
    D1, total1 = _discount(cont1.counts), float(cont1.counts.sum())
    p1 = np.maximum(cont1(w) - D1, 0.0) / total1 + D1 * len(cont1.keys) / total1 / V  # (Q,)
    bigram = _level(bi_types, bi_types.keys // V, v * V + w, v, p1)
    cont2 = _Counts.of(tri_types.keys % (V * V))  # continuation bigram N1+(. v w)
    p2 = _level(cont2, cont2.keys // V, v * V + w, v, p1)
    trigram = _level(tri_types, tri_types.keys // V, (u * V + v) * V + w, u * V + v, p2)
    return {name: float(-np.mean(np.log(p))) for name, p in zip(ORDERS, (unigram, bigram, trigram), strict=True)}


def text_floors(data: Any) -> dict[str, dict[str, float]]:
    """Per evaluation split of a text ``Corpus`` ("val", and "test" when it has one): nats per
    token of each n-gram order. Cached per corpus (its sha256)."""
    key = (data.sha256, data.vocab_size)
    if key not in _TEXT_CACHE:
        train = data.train.numpy()
        splits = {"val": data.val, **({"test": data.test} if data.test is not None else {})}
        _TEXT_CACHE[key] = {s: ngram_cross_entropy(train, t.numpy(), data.vocab_size) for s, t in splits.items()}
    return _TEXT_CACHE[key]


def majority_answers(targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(T,) the answer most often seen at each position of ``targets`` (N, T); where a position
    is never scored, the most common answer overall."""
    T = targets.size(1)
    scored = targets != IGNORE  # (N, T)
    pos = torch.arange(T).expand_as(targets)[scored]  # (S,)
    counts = torch.bincount(pos * vocab_size + targets[scored], minlength=T * vocab_size).view(T, vocab_size)
    best = counts.argmax(dim=1)  # (T,)
    return torch.where(counts.sum(dim=1) > 0, best, counts.sum(dim=0).argmax())


def measured_guess(train_targets: torch.Tensor, batch: TaskBatch, vocab_size: int) -> float:
    """Accuracy on ``batch`` of the trivial model: the majority training answer at each position."""
    guess = majority_answers(train_targets, vocab_size)  # (T,)
    T = min(guess.size(0), batch.targets.size(1))
    y = batch.targets[:, :T]  # (N, T)
    scored = y != IGNORE
    return float((y == guess[:T])[scored].float().mean()) if scored.any() else float("nan")


def task_guess_accuracy(task: Task, options: Any, batch: TaskBatch, train_targets: torch.Tensor, vocab: int) -> float:
    """The task's declared guessing accuracy on ``batch``, else the measured one."""
    if task.guess_accuracy is not None:
        return float(task.guess_accuracy(options, batch))
    return measured_guess(train_targets, batch, vocab)


def guess_method(task: Task) -> str:
    """How a task's guessing accuracy is known, in words."""
    if task.guess_accuracy is not None:
        return "declared: " + (task.guess_rule or "by the task")
    return MEASURED
