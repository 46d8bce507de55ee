"""Null levels a trained model must clear, computed from a cell's data alone (counts, no training).

Text: an evaluation split's cross-entropy under n-gram models fitted on the training split
(unigram add-one; bigram and trigram interpolated Kneser-Ney, Chen & Goodman 1999, discount
n1 / (n1 + 2 n2) per order, the lowest order mixed with uniform), all scoring the split's tokens
from the third on. Tasks: the null level, the best accuracy of binding-free predictors fitted on
the training examples (data/nulls.py) and of the task's declared level (``Task.guess_accuracy``,
checked to be a float in [0, 1]), on each evaluation set's own examples.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from attnbench.contract.task import Task, TaskBatch
from attnbench.data.nulls import NullLevel, describe, fit_predictors, null_level
from attnbench.errors import PluginError, quoted

ORDERS = ("unigram", "bigram", "trigram")
SMOOTHING = "unigram add-one; bigram and trigram interpolated Kneser-Ney (discount n1/(n1+2n2) per order)"
_TEXT_CACHE: dict[tuple[str, int], dict[str, dict[str, float]]] = {}  # per corpus: its floors per split
_TASK_CACHE: dict[tuple[str, Task], list[tuple[str, Any, NullLevel]]] = {}  # per task data: its nulls per set


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


def check_declared(task: Task, options: Any, value: object) -> float:
    """``value``, a task's declared level at ``options``, as a float; a PluginError naming the task,
    the setting and the value unless it is a finite real number in [0, 1] (bool and str refused)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        level = float(value)
        if math.isfinite(level) and 0.0 <= level <= 1.0:
            return level
    raise PluginError(
        f"task {task.name!r} declared guess_accuracy {quoted(value)} at options {quoted(options)}: "
        "the declared level must be a float in [0, 1] (an accuracy); fix the task's guess_accuracy"
    )


def declared_level(task: Task, options: Any, batch: TaskBatch) -> float | None:
    """The task's declared level on ``batch`` (checked), or None where it declares none."""
    if task.guess_accuracy is None:
        return None
    return check_declared(task, options, task.guess_accuracy(options, batch))


def task_null_levels(
    task: Task, train: TaskBatch, vocab: int, sets: Sequence[tuple[Any, TaskBatch]]
) -> list[NullLevel]:
    """Per evaluation set ``(options, batch)``: the best of the task's binding-free predictors
    (fitted once on ``train``) and its declared level, on that set's own examples."""
    fitted = fit_predictors(train, vocab, task.null_predictors)
    return [null_level(fitted, batch, declared_level(task, options, batch)) for options, batch in sets]


def task_floors(data: Any) -> list[tuple[str, Any, NullLevel]]:
    """Per evaluation set of a ``TaskData`` (validation sets, then test sets): (split, options,
    null level). Cached per data (its sha256) and task."""
    key = (data.sha256, data.task)
    if key not in _TASK_CACHE:
        splits = [("val", e) for e in data.evals] + [("test", e) for e in data.tests]
        train = TaskBatch(data.train_inputs, data.train_targets)
        levels = task_null_levels(data.task, train, data.vocab_size, [e for _, e in splits])
        _TASK_CACHE[key] = [(split, options, lv) for (split, (options, _)), lv in zip(splits, levels, strict=True)]
    return _TASK_CACHE[key]


def task_guess_accuracy(task: Task, options: Any, batch: TaskBatch, train: TaskBatch, vocab: int) -> float:
    """The task's null level on ``batch``: the best binding-free predictor or its declared level."""
    return task_null_levels(task, train, vocab, [(options, batch)])[0].value


def guess_method(task: Task) -> str:
    """How a task's null level is found, in words."""
    words = f"best of binding-free predictors: {describe(task.null_predictors)}"
    if task.guess_accuracy is not None:
        words += "; and the declared level: " + (task.guess_rule or "by the task")
    return words
