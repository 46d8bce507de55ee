"""Byte-level associative recall: the training side of the `attnbench_recall` lm-eval task.

Each example is one line of the text format of ``attnbench.data.heldout`` (key-value pairs,
a separator, then the queried keys each followed by its value)::

    d7 k2 a9 q4 m0 x2 e5 b8 | k2 q4 d7 a9

read as bytes (vocabulary 256), so a model trained on this task in a suite can then be
scored by the multiple-choice lm-eval task `attnbench_recall` on the same format (its
documents come from a seed stream that training never uses). Only the answers (the value
byte after each queried key) are scored, so accuracy is recall accuracy; every row is
tagged with ``n_pairs`` and ``n_queries``. The generator and the declared guess's accuracy live in
``attnbench.plugins.tasks.text_recall_data``; this module holds the options and registers the task
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench import RecallOptions, Task, hookimpl, recall_line

if TYPE_CHECKING:
    pass


DATA = "attnbench.plugins.tasks.text_recall_data"  # torch: imported when the first batch is made

BYTE_VOCAB = 256


@dataclass(frozen=True)
class TextRecallOptions(RecallOptions):
    """n_pairs: key-value pairs before the separator (1..26); n_queries: keys queried after
    it (1..n_pairs). The line length, and so seq_len, follows from both."""


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
            generate=f"{DATA}:generate",
            vocab_size=lambda options: BYTE_VOCAB,
            seq_len=seq_len,
            version="1",
            tokens="bytes",
            guess_accuracy=f"{DATA}:guess_accuracy",
            guess_rule="uniform over the distinct values present in the line's pairs",
            # All binding-free predictors: queries are a random sample of the keys, so none binds a
            # query to its pair; the most frequent digit seen so far (answer_frequency) and "the
            # r-th query asks the r-th pair" (copy_by_rank) beat the uniform guess above.
            null_predictors=None,
            description="associative recall as text bytes (trains for the attnbench_recall lm-eval task)",
        )
    )
