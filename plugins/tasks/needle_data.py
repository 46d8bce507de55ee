"""The needle tasks' generator (registered by ``attnbench.plugins.tasks.needle``, which imports
this module on first use and holds the options): the example texts of
``attnbench.data.needle`` as byte tensors.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import torch

from attnbench import IGNORE, TaskBatch, needle_example

if TYPE_CHECKING:
    from attnbench.plugins.tasks.needle import NeedleOptions


def generate(options: NeedleOptions, n: int, seed: int) -> TaskBatch:
    rng = random.Random(seed)
    depths = options.depth if isinstance(options.depth, tuple) else (options.depth,)
    texts, answer = [], 0
    for _ in range(n):
        ex = needle_example(
            rng, options.KIND, options.seq_len, rng.choice(depths), options.n_keys, options.value_len, options.haystack
        )
        texts.append(list(ex.text.encode("ascii")))
        answer = len(ex.answer)
    data = torch.tensor(texts, dtype=torch.long).view(n, options.seq_len + 1)  # (N, T + 1) bytes
    inputs, targets = data[:, :-1], data[:, 1:].clone()  # (N, T), (N, T): target t is byte t + 1
    targets[:, : options.seq_len - answer] = IGNORE  # only the value's bytes are scored
    return TaskBatch(inputs, targets)
