"""MAD's synthetic tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid
Architectures", MAD-lab) in attnbench's language-model framing.

Every task returns ``TaskBatch(inputs, targets)``, (N, T) int64, generated with vectorised
torch ops from a local ``torch.Generator(seed)``; ``targets[i, t]`` is the token predicted
from ``inputs[i, :t+1]`` at answer positions and ``IGNORE`` everywhere else. T (``seq_len``)
is always the model's input length. MAD's sixth task, selective copying, is the existing
``selective_copy`` task (plugins/tasks/synthetic.py). The generators live in
``attnbench.plugins.tasks.mad_data``, the options in ``mad_options``; this module registers the
tasks without importing torch.

* ``mad_recall`` (in-context recall): ``k v k v ...`` pairs; keys from the lower half of
  the vocabulary, each bound to one value (upper half) for the whole sequence; keys
  repeat, and every repeat of a key is a query: its value is the target (MAD's
  ``multi_query``). The last pair always repeats an earlier key.
* ``mad_noisy_recall``: ``mad_recall`` where each pair is, with probability
  ``frac_noise``, replaced by two tokens of a separate noise vocabulary (the top
  ``noise_vocab_size`` tokens) that the model must ignore.
* ``mad_fuzzy_recall``: keys and values are motifs of 1..``key_len`` / 1..``value_len``
  tokens (lengths drawn per pair), so the model must segment them; a repeated key motif
  (same length, same tokens) is a query for every token of its value motif. Sequences are
  right-aligned and left-padded with the pad token (V-1).
* ``mad_compression``: T/2 random tokens, a compression token, then T/2-1 blanks; the
  targets from the compression token on are the T/2 tokens in order. MAD encodes the
  sequence into ONE position and decodes every token through an MLP from that vector
  plus a position embedding. A causal LM can attend back to the input, so for softmax
  attention this framing is copying; for fixed-state mixers the whole sequence has to
  pass through the state at the compression token, which is the compression MAD tests.
* ``mad_memorization``: ``k I k I ...`` with an insert token I; the target at each I is the
  value a FIXED key->value bijection (drawn from ``map_seed``, identical in every example
  and split) assigns to the key: the map lives in the weights, not in the context.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl
from attnbench.plugins.tasks.mad_options import (
    CompressionOptions,
    FuzzyRecallOptions,
    MemorizationOptions,
    NoisyRecallOptions,
    RecallOptions,
)

if TYPE_CHECKING:
    from attnbench import TaskBatch


# Registration ---------------------------------------------------------------------------------


def _coords(*names: str):
    def coords(options: Any) -> dict[str, Any]:
        d = asdict(options)
        return {k: d[k] for k in names}

    return coords


def _task(
    name: str,
    options: type,
    generate: Any,
    coords: tuple[str, ...],
    description: str,
    guess: tuple[Any, str] | None,
    nulls: tuple[str, ...] | None = None,
) -> Task:
    """``guess``: (a declared guess's accuracy from the options, its rule in words), one candidate
    of the null level beside the measured ``nulls`` predictors (None: all of them)."""
    return Task(
        name,
        options,
        generate,
        vocab_size=lambda o: o.vocab_size,
        seq_len=lambda o: o.seq_len,
        coords=_coords(*coords),
        description=description,
        version="1",
        guess_accuracy=None if guess is None else (lambda o, _batch: guess[0](o)),
        guess_rule="" if guess is None else guess[1],
        null_predictors=nulls,
    )


def _generate_recall(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.mad_data import generate_recall  # torch loads with the data, not the registration

    return generate_recall(options, n, seed)


def _generate_fuzzy_recall(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.mad_data import generate_fuzzy_recall

    return generate_fuzzy_recall(options, n, seed)


def _generate_compression(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.mad_data import generate_compression

    return generate_compression(options, n, seed)


def _generate_memorization(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.mad_data import generate_memorization

    return generate_memorization(options, n, seed)


# Uniform guesses, each one candidate of the null level: the measured binding-free predictors
# beat them where the context gives answers away. In recall the values seen so far repeat, so
# "the most frequent value seen so far" (answer_frequency) scores ~0.37 at V16/T32 against 1/Vk;
# in compression the data tokens repeat among V - 2.
_RECALL_GUESS = (lambda o: 1.0 / ((o.vocab_size - o.noise_vocab_size) // 2), "uniform over the Vk values")
_COMPRESSION_GUESS = (lambda o: 1.0 / (o.vocab_size - 2), "uniform over the V - 2 data tokens")
_MEMORIZATION_GUESS = (lambda o: 1.0 / ((o.vocab_size - 1) // 2), "uniform over the Vk values (the map unknown)")
# Compression in the LM framing is copying the T/2 tokens from fixed positions: the copy
# predictors are the capability under test (copy_by_rank scores 1.0), so they are left out.
_NOT_COPYING = ("position_majority", "answer_frequency")


@hookimpl
def attnbench_register_tasks(register) -> None:
    # Null predictors: all for the recall tasks (none looks a key's earlier occurrence up) and for
    # memorization (the inputs hold no values, and none knows the fixed map); compression leaves
    # the copy predictors out (they are its capability).
    base = ("vocab_size", "seq_len")
    register(
        _task(
            "mad_recall",
            RecallOptions,
            _generate_recall,
            base,
            "MAD in-context recall (every repeat queried)",
            _RECALL_GUESS,
        )
    )
    register(
        _task(
            "mad_noisy_recall",
            NoisyRecallOptions,
            _generate_recall,
            (*base, "noise_vocab_size", "frac_noise"),
            "MAD noisy recall: in-context recall with pairs of noise tokens",
            _RECALL_GUESS,
        )
    )
    register(
        _task(
            "mad_fuzzy_recall",
            FuzzyRecallOptions,
            _generate_fuzzy_recall,
            (*base, "key_len", "value_len"),
            "MAD fuzzy recall: keys and values of 1..key_len / 1..value_len tokens",
            None,  # motifs of varying length: no declared guess, the predictors alone
        )
    )
    register(
        _task(
            "mad_compression",
            CompressionOptions,
            _generate_compression,
            base,
            "MAD compression (LM framing): reproduce T/2 tokens after a compression token",
            _COMPRESSION_GUESS,
            _NOT_COPYING,
        )
    )
    register(
        _task(
            "mad_memorization",
            MemorizationOptions,
            _generate_memorization,
            base,
            "MAD memorization: a fixed key->value map recalled without context",
            _MEMORIZATION_GUESS,
        )
    )
