"""Synthetic recall tasks: MQAR, selective copying, induction recall, noisy (fuzzy) recall.

Every task returns ``TaskBatch(inputs, targets)``, both (N, T) int64 on the CPU, built
with vectorised torch ops from a local ``torch.Generator(seed)`` (never the global RNG),
so ``generate(options, n, seed)`` is exactly reproducible. ``targets[i, t]`` is the token
the model must predict from ``inputs[i, :t+1]`` (its logits at position t) at answer
positions, and ``IGNORE`` (-100) everywhere else, so loss and accuracy see answers only.
The generators live in ``attnbench.plugins.tasks.synthetic_data``, the options in
``synthetic_options``; this module registers the tasks without importing torch.

Tasks and their layouts (T = seq_len, V = vocab_size):

* ``mqar`` (Zoology's multi-query associative recall, Arora et al. 2023): keys from
  ``[1, V//2)``, values from ``[V//2, V)``, each distinct within an example; the K pairs
  first as ``k1 v1 k2 v2 ...`` (positions 0..2K-1); then each key once more as a query
  at position ``2K + 2g``, with gaps g drawn without replacement from ``0..(T-2K)//2-1``
  with probability proportional to ``(g+1)^(power_a-1)`` (a power law: small gaps, i.e.
  queries soon after the pairs, are the most likely); the target at a query is the value
  bound to its key. Other positions hold random tokens from ``[0, V)`` (or 0).
* ``noisy_recall``: MQAR with fuzzy keys (see ``NoisyRecallOptions``).
* ``selective_copy``: n data tokens at random positions of a blank region, a separator,
  then the data tokens in order (see ``SelectiveCopyOptions``).
* ``induction``: trigger/answer bigrams recalled when the trigger reappears (see
  ``InductionOptions``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl
from attnbench.plugins.tasks.synthetic_options import (
    InductionOptions,
    MQAROptions,
    NoisyRecallOptions,
    SelectiveCopyOptions,
)

if TYPE_CHECKING:
    from attnbench import TaskBatch

# Registration -----------------------------------------------------------------------------


def _vocab(options: Any) -> int:
    return options.vocab_size


def _seq_len(options: Any) -> int:
    return options.seq_len


def _coords(*names: str):
    def coords(options: Any) -> dict[str, Any]:
        d = asdict(options)
        return {k: d[k] for k in names}

    return coords


def _generate_mqar(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.synthetic_data import generate_mqar  # torch loads with the data, not the registration

    return generate_mqar(options, n, seed)


def _generate_noisy_recall(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.synthetic_data import generate_noisy_recall

    return generate_noisy_recall(options, n, seed)


def _generate_selective_copy(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.synthetic_data import generate_selective_copy

    return generate_selective_copy(options, n, seed)


def _generate_induction(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.synthetic_data import generate_induction

    return generate_induction(options, n, seed)


_ONE_OF_K = "uniform over the K distinct values shown in the pairs"

# Null levels: every task here is measured against all binding-free predictors
# (attnbench.data.nulls; null_predictors=None), the declared uniform guess being one more
# candidate. None of them is the capability under test: no predictor matches a query to its
# pair (MQAR, noisy recall), a trigger to its earlier occurrence (induction), or picks the data
# tokens out of the blanks by content (selective copying). They do beat the uniform guesses:
# with quiet fill MQAR's queries come roughly in the order of their pairs, so "the r-th query
# asks the r-th pair" (copy_by_rank) scores ~0.55 / 0.32 / 0.27 at K = 2 / 4 / 6 against 1/K;
# a selective copy's data tokens repeat among V - 2, so the most frequent one seen
# (answer_frequency) beats 1/(V - 2).


@hookimpl
def attnbench_register_tasks(register) -> None:
    common: dict[str, Any] = {"vocab_size": _vocab, "seq_len": _seq_len, "version": "1"}
    register(
        Task(
            "mqar",
            MQAROptions,
            _generate_mqar,
            coords=_coords("num_kv_pairs", "seq_len", "vocab_size"),
            description="Zoology multi-query associative recall (power-law query gaps)",
            guess_accuracy=lambda o, _batch: 1.0 / o.num_kv_pairs,
            guess_rule=_ONE_OF_K,
            null_predictors=None,  # all: none binds a query's key to its value
            **common,
        )
    )
    register(
        Task(
            "noisy_recall",
            NoisyRecallOptions,
            _generate_noisy_recall,
            coords=_coords("num_kv_pairs", "seq_len", "vocab_size", "neighbours", "noise_prob"),
            description="MQAR with fuzzy keys: queries show a neighbour of the key token",
            guess_accuracy=lambda o, _batch: 1.0 / o.num_kv_pairs,
            guess_rule=_ONE_OF_K,
            null_predictors=None,  # all: none binds a query's key block to its value
            **common,
        )
    )
    register(
        Task(
            "selective_copy",
            SelectiveCopyOptions,
            _generate_selective_copy,
            coords=_coords("num_tokens", "seq_len", "vocab_size"),
            description="copy the data tokens scattered among blanks, in order, after a separator",
            guess_accuracy=lambda o, _batch: 1.0 / (o.vocab_size - 2),
            guess_rule="uniform over the V - 2 data tokens",
            null_predictors=None,  # all: fixed-position copies do not select the data tokens by content
            **common,
        )
    )
    register(
        Task(
            "induction",
            InductionOptions,
            _generate_induction,
            coords=_coords("num_triggers", "seq_len", "vocab_size"),
            description="induction recall: a trigger's earlier successor, when the trigger reappears",
            guess_accuracy=lambda o, _batch: 1.0 / (o.vocab_size - o.num_triggers),
            guess_rule="uniform over the V - G non-trigger tokens (answers are drawn uniformly from them)",
            null_predictors=None,  # all: none finds the trigger's earlier occurrence
            **common,
        )
    )
