"""Null levels a trained model must clear, computed from a cell's data alone (counts, no training).

Text: the cross-entropy of n-gram models fitted on the training split (unigram add-one; bigram to
4-gram interpolated Kneser-Ney, Chen & Goodman 1999, discount n1 / (n1 + 2 n2) per order, the
lowest order mixed with uniform) on exactly the targets a model is scored on: its evaluation
windows, each target seeing only its window's earlier tokens (the model's context limit).
Tasks: the null level, the best accuracy of binding-free predictors fitted on the training examples
(data/nulls.py) and of the task's declared level (``Task.guess_accuracy``, checked to be a float in
[0, 1]), on each evaluation set's own examples.
"""

from __future__ import annotations

import hashlib
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

ORDERS = ("unigram", "bigram", "trigram", "4gram")
MAX_ORDER = len(ORDERS)
SMOOTHING = (
    "unigram add-one; bigram to 4-gram interpolated Kneser-Ney (discount n1/(n1+2n2) per order), scored on the "
    "model's own evaluation windows with its context limit"
)
_TEXT_CACHE: dict[tuple[str, int], NGramCounts] = {}  # per corpus: its n-gram counts
_SCORED_CACHE: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}  # per corpus and evaluation windows
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


class NGramCounts:
    """Counts of a training token stream for interpolated Kneser-Ney models up to ``order``: raw
    n-gram counts for each top order, and continuation counts N1+(. h w) for the lower levels."""

    def __init__(self, train: npt.ArrayLike, vocab_size: int, order: int = MAX_ORDER) -> None:
        x = np.asarray(train, dtype=np.int64)
        if len(x) < order:
            raise ValueError(f"n-gram floors need at least {order} training tokens")
        self.V, self.order, self.n_train = int(vocab_size), order, len(x)
        self.raw = {j: _Counts.of(_grams(x, j, self.V)) for j in range(1, order + 1)}  # c(h w)
        # N1+(. h w): distinct left extensions of each j-gram, over the (j+1)-gram types
        self.cont = {j: _Counts.of(self.raw[j + 1].keys % self.V**j) for j in range(1, order)}

    def unigram(self, w: np.ndarray) -> np.ndarray:
        """(Q,) add-one unigram probabilities."""
        return (self.raw[1](w) + 1.0) / (self.n_train + self.V)

    def probs(self, history: np.ndarray, w: np.ndarray) -> np.ndarray:
        """(Q,) P(w | history) under the interpolated Kneser-Ney model of order k + 1, ``history``
        (Q, k) the k tokens before each scored ``w`` (Q,); the top level reads raw counts."""
        top = history.shape[1] + 1
        V = self.V
        cont1 = self.cont[1]  # continuation unigram N1+(. w), interpolated with uniform
        D1, total1 = _discount(cont1.counts), float(cont1.counts.sum())
        p = np.maximum(cont1(w) - D1, 0.0) / total1 + D1 * len(cont1.keys) / total1 / V  # (Q,)
        for j in range(2, top + 1):
            grams = self.raw[j] if j == top else self.cont[j]
            h = _pack(history[:, history.shape[1] - (j - 1) :], V)  # (Q,) the last j - 1 tokens
            p = _level(grams, grams.keys // V, h * V + w, h, p)
        return p


def _grams(x: np.ndarray, n: int, V: int) -> np.ndarray:
    """Every n-gram of ``x``, packed base V."""
    keys = np.zeros(len(x) - n + 1, dtype=np.int64)
    for i in range(n):
        keys = keys * V + x[i : len(x) - n + 1 + i]
    return keys


def _pack(cols: np.ndarray, V: int) -> np.ndarray:
    """(Q,) the rows of ``cols`` (Q, k) packed base V."""
    keys = np.zeros(len(cols), dtype=np.int64)
    for i in range(cols.shape[1]):
        keys = keys * V + cols[:, i]
    return keys


def window_cross_entropy(counts: NGramCounts, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Nats per target of ``y`` (N, T) under each n-gram order, each target seeing only the tokens
    a model scored on these windows sees: its window ``x`` (N, T) up to its own position (an order-n
    model uses the last min(n - 1, t + 1) of them). The same targets and context limit as the model."""
    T = x.shape[1]
    out = {"unigram": float(-np.mean(np.log(counts.unigram(y.reshape(-1)))))}
    for order, name in enumerate(ORDERS[1:], start=2):
        seen = np.minimum(order - 1, np.arange(T) + 1)  # (T,) history tokens available at each position
        logs = []
        for k in np.unique(seen):  # one call per history length: positions t with min(order - 1, t + 1) == k
            ts = np.nonzero(seen == k)[0]  # (P,)
            hist = np.stack([x[:, ts - int(k) + 1 + i] for i in range(int(k))], axis=-1)  # (N, P, k)
            logs.append(np.log(counts.probs(hist.reshape(-1, int(k)), y[:, ts].reshape(-1))))  # (N * P,)
        out[name] = float(-np.mean(np.concatenate(logs)))
    return out


def ngram_cross_entropy(train: npt.ArrayLike, test: npt.ArrayLike, vocab_size: int) -> dict[str, float]:
    """Nats per token of ``test`` (from its third token on, each seeing every earlier token) under
    unigram to 4-gram models fitted on ``train``."""
    y = np.asarray(test, dtype=np.int64)
    if len(y) < 3:
        raise ValueError("n-gram floors need at least 3 training and 3 test tokens")
    counts = NGramCounts(train, vocab_size)
    scored = np.arange(2, len(y))  # (Q,) positions of the scored tokens
    out = {"unigram": float(-np.mean(np.log(counts.unigram(y[scored]))))}
    for order, name in enumerate(ORDERS[1:], start=2):
        seen = np.minimum(order - 1, scored)  # (Q,) history tokens each scored token can use
        logs = []
        for h in np.unique(seen):
            pos = scored[seen == h]  # (q,)
            hist = np.stack([y[pos - int(h) + i] for i in range(int(h))], axis=1)  # (q, h)
            logs.append(np.log(counts.probs(hist, y[pos])))
        out[name] = float(-np.mean(np.concatenate(logs)))
    return out


def targets_fingerprint(batches: Sequence[tuple[Any, Any]]) -> str:
    """A short hash of evaluation windows (inputs and targets): a floor and a model value stand on
    one line only where both carry the same one."""
    h = hashlib.sha256()
    for x, y in batches:
        h.update(np.asarray(x, dtype=np.int64).tobytes() + np.asarray(y, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def text_floors(data: Any, batch_size: int, seq_len: int, max_tokens: int) -> dict[str, dict[str, Any]]:
    """Per evaluation split of a text ``Corpus`` ("val", and "test" when it has one): nats per
    target of each n-gram order on exactly the windows a model is evaluated on (``eval_sets`` at
    this batch size, length and token cap), and their ``targets`` fingerprint. Counts cached per corpus."""
    key = (data.sha256, data.vocab_size)
    if key not in _TEXT_CACHE:
        _TEXT_CACHE[key] = NGramCounts(data.train.numpy(), data.vocab_size)
    counts = _TEXT_CACHE[key]
    scored = (data.sha256, data.vocab_size, batch_size, seq_len, max_tokens)
    if scored in _SCORED_CACHE:
        return _SCORED_CACHE[scored]
    out: dict[str, dict[str, Any]] = {}
    for es in data.eval_sets(batch_size, seq_len, max_tokens):
        x = np.concatenate([np.asarray(b[0], dtype=np.int64) for b in es.batches])  # (N, T)
        y = np.concatenate([np.asarray(b[1], dtype=np.int64) for b in es.batches])  # (N, T)
        out[es.tags.get("split", "val")] = {
            **window_cross_entropy(counts, x, y),
            "targets": targets_fingerprint(es.batches),
        }
    _SCORED_CACHE[scored] = out
    return out


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
