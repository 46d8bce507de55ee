"""The text_recall task's generator and its declared guess's accuracy, one candidate of its null
level (registered by ``attnbench.plugins.tasks.text_recall``, which imports this module on first use
and holds the options).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from attnbench import TaskBatch, recall_training_tensors
from attnbench.plugins.tasks.text_recall import BYTE_VOCAB

if TYPE_CHECKING:
    from attnbench.plugins.tasks.text_recall import TextRecallOptions


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
