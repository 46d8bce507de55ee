"""Byte-level associative recall: the training side of the `attnbench_recall` lm-eval task.

Each example is one line of the text format of ``attnbench.data.heldout`` (key-value pairs,
a separator, then the queried keys each followed by its value)::

    d7 k2 a9 q4 m0 x2 e5 b8 | k2 q4 d7 a9

read as bytes (vocabulary 256), so a model trained on this task in a suite can then be
scored by the multiple-choice lm-eval task `attnbench_recall` on the same format (its
documents come from a seed stream that training never uses). Only the answers (the value
byte after each queried key) are scored, so accuracy is recall accuracy; every row is
tagged with ``n_pairs`` and ``n_queries``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench import RecallOptions, Task, TaskBatch, hookimpl, recall_line, recall_training_tensors

BYTE_VOCAB = 256


@dataclass(frozen=True)
class TextRecallOptions(RecallOptions):
    """n_pairs: key-value pairs before the separator (1..26); n_queries: keys queried after
    it (1..n_pairs). The line length, and so seq_len, follows from both."""


def generate(options: TextRecallOptions, n: int, seed: int) -> TaskBatch:
    inputs, targets = recall_training_tensors(
        n, seed=seed, n_pairs=options.n_pairs, n_queries=options.n_queries
    )  # (n, T), (n, T)
    return TaskBatch(inputs, targets)


def guess_accuracy(options: TextRecallOptions, batch: TaskBatch) -> float:
    """Expected accuracy of guessing uniformly among the distinct values of the line's pairs
    (every answer is one of them): the mean of 1 / (distinct values) over the lines, whose
    answers are equally many."""
    values = batch.inputs[:, 1 : 3 * options.n_pairs : 3]  # (N, n_pairs) the value byte of each pair
    present = torch.zeros(values.size(0), BYTE_VOCAB, dtype=torch.bool).scatter_(1, values, True)  # (N, 256)
    return float((1.0 / present.sum(dim=1).double()).mean())


def seq_len(options: TextRecallOptions) -> int:
    """Every line has the same length: 3 chars per pair, "| ", 3 chars per query, "\\n";
    inputs drop the last byte (it is only ever a target)."""
    pairs = [(chr(97 + i), "0") for i in range(options.n_pairs)]
    queries = [k for k, _ in pairs[: options.n_queries]]
    return len(recall_line(pairs, queries)) - 1


@hookimpl
def attnbench_register_tasks(register) -> None:
    register(
        Task(
            name="text_recall",
            options=TextRecallOptions,
            generate=generate,
            vocab_size=lambda options: BYTE_VOCAB,
            seq_len=seq_len,
            version="1",
            tokens="bytes",
            guess_accuracy=guess_accuracy,
            guess_rule="uniform over the distinct values present in the line's pairs",
            description="associative recall as text bytes (trains for the attnbench_recall lm-eval task)",
        )
    )
