"""Null levels computed by the harness: n-gram cross-entropy on a tiny corpus against a
hand computation, and the declared guesses of the recall tasks against their exact values (one
candidate of the measured null; tests/test_nulls.py tests the predictors)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from attnbench.contract.task import IGNORE, Task, TaskBatch
from attnbench.data.floors import declared_level, guess_method, ngram_cross_entropy, task_guess_accuracy
from attnbench.data.nulls import accuracy, fit_predictors
from attnbench.plugins.tasks import (
    synthetic,
    synthetic_data,
    text_recall,
    text_recall_data,
)

TRAIN = b"abracadabra abracadabra cab"
TEST = b"cadabra bac"


def _discount(counts: Counter) -> float:
    n1, n2 = sum(c == 1 for c in counts.values()), sum(c == 2 for c in counts.values())
    return n1 / (n1 + 2 * n2)


def _kneser_ney(train: bytes, test: bytes, V: int = 256) -> tuple[float, float, float]:
    """The textbook formulas, one probability at a time (Chen & Goodman 1999, interpolated KN)."""
    tri = Counter(zip(train, train[1:], train[2:], strict=False))
    bi = Counter(zip(train, train[1:], strict=False))
    cont_bi = Counter((v, w) for (_, v, w) in tri)  # N1+(. v w)
    cont_uni = Counter(w for (_, w) in bi)  # N1+(. w)
    D1, D2, Db, D3 = _discount(cont_uni), _discount(cont_bi), _discount(bi), _discount(tri)

    def p1(w):
        total = sum(cont_uni.values())
        return max(cont_uni[w] - D1, 0) / total + D1 * len(cont_uni) / total / V

    def level(counts, D, h, w, lower):
        c_h = sum(c for g, c in counts.items() if g[:-1] == h)
        if c_h == 0:
            return lower
        types = sum(1 for g in counts if g[:-1] == h)
        return max(counts[(*h, w)] - D, 0) / c_h + D * types / c_h * lower

    uni, big, trig = [], [], []
    for u, v, w in zip(test, test[1:], test[2:], strict=False):
        uni.append(math.log((Counter(train)[w] + 1) / (len(train) + V)))
        big.append(math.log(level(bi, Db, (v,), w, p1(w))))
        trig.append(math.log(level(tri, D3, (u, v), w, level(cont_bi, D2, (v,), w, p1(w)))))
    return tuple(-sum(x) / len(x) for x in (uni, big, trig))  # type: ignore[return-value]


def test_ngram_floors_equal_a_hand_computation_on_a_tiny_corpus():
    got = ngram_cross_entropy(list(TRAIN), list(TEST), 256)
    want = _kneser_ney(TRAIN, TEST)
    assert [got[o] for o in ("unigram", "bigram", "trigram")] == pytest.approx(want, rel=1e-12)
    # the unigram by hand: "c" is 3 of 27 training bytes, add-one over 256 -> 4 / 283 (first scored byte: "d")
    assert math.exp(-ngram_cross_entropy(list(TRAIN), list(b"cad"), 256)["unigram"]) == pytest.approx(3 / 283)
    assert got["unigram"] > got["bigram"] > got["trigram"]  # more context, lower loss on this corpus


def test_text_recall_declared_guess_is_uniform_over_the_values_in_the_line():
    options = text_recall.TextRecallOptions(n_pairs=7, n_queries=1)
    batch = text_recall_data.generate(options, 400, 5)
    lines = [bytes(row.tolist()).decode("ascii") for row in batch.inputs]
    exact = sum(1 / len({line[3 * i + 1] for i in range(7)}) for line in lines) / len(lines)
    task = _registered(text_recall, "text_recall")
    assert declared_level(task, options, batch) == pytest.approx(exact, rel=1e-12)
    assert 1 / 7 < exact < 1 / 4  # values repeat among 10 digits: fewer distinct than pairs
    train = text_recall_data.generate(options, 800, 6)
    assert task_guess_accuracy(task, options, batch, train, 256) >= exact  # the null: the max, declared included
    assert "and the declared level: uniform over the distinct values" in guess_method(task)


def test_mqar_declared_guess_is_one_over_the_pairs():
    options = synthetic.MQAROptions(vocab_size=64, seq_len=32, num_kv_pairs=4)
    batch = synthetic_data.generate_mqar(options, 200, 1)
    values = batch.targets[batch.targets != IGNORE].view(200, 4)  # (N, K) every pair queried once
    assert all(len(set(row.tolist())) == 4 for row in values)  # K distinct values: one in K
    task = _registered(synthetic, "mqar")
    assert declared_level(task, options, batch) == 0.25
    train = synthetic_data.generate_mqar(options, 400, 2)
    assert task_guess_accuracy(task, options, batch, train, 64) >= 0.25


def test_a_task_without_a_declaration_is_measured_by_its_predictors():
    train = TaskBatch(
        torch.zeros(3, 3, dtype=torch.long), torch.tensor([[IGNORE, 3, 5], [IGNORE, 3, 6], [IGNORE, 4, 5]])
    )
    test = TaskBatch(torch.zeros(2, 3, dtype=torch.long), torch.tensor([[IGNORE, 3, 6], [IGNORE, 4, 5]]))
    majority = fit_predictors(train, 8, ["position_majority"])["position_majority"]  # position 1: 3, position 2: 5
    assert accuracy(majority, test) == 0.5
    plain = Task("plain", synthetic.MQAROptions, synthetic_data.generate_mqar, lambda o: 8, lambda o: 3)
    assert task_guess_accuracy(plain, None, test, train, 8) == 0.5  # no input is an answer: no copy scores
    assert guess_method(plain).startswith("best of binding-free predictors: position_majority (")
    assert "declared" not in guess_method(plain)


def _registered(module, name: str) -> Task:
    found: list[Task] = []
    module.attnbench_register_tasks(found.append)
    return next(t for t in found if t.name == name)


def test_window_floors_score_every_target_with_only_its_window_s_earlier_tokens():
    """The floors a text row stands beside: each target of each evaluation window, an order-n model
    seeing the last min(n - 1, t + 1) tokens of its own window, against a one-target-at-a-time
    computation; the first target of a window is scored by the bigram whatever the order."""
    from attnbench.data.floors import NGramCounts, window_cross_entropy

    train = np.frombuffer(TRAIN * 3, dtype=np.uint8).astype(np.int64)
    stream = np.frombuffer(b"cadabra abracad bra", dtype=np.uint8).astype(np.int64)
    x, y = stream[:18].reshape(3, 6), stream[1:19].reshape(3, 6)  # 3 windows of 6 targets
    counts = NGramCounts(train, 256)
    got = window_cross_entropy(counts, x, y)
    for order, name in ((2, "bigram"), (3, "trigram"), (4, "4gram")):
        logs = [
            math.log(counts.probs(x[n : n + 1, max(0, t + 1 - (order - 1)) : t + 1], y[n, t : t + 1])[0])
            for n in range(3)
            for t in range(6)
        ]
        assert got[name] == pytest.approx(-sum(logs) / len(logs), rel=1e-12)
    first = window_cross_entropy(counts, x[:, :1], y[:, :1])
    assert first["bigram"] == first["trigram"] == first["4gram"]  # one token of context: the bigram
