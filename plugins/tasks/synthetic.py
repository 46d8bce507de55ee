"""Synthetic recall tasks: MQAR, selective copying, induction recall, noisy (fuzzy) recall.

Every task returns ``TaskBatch(inputs, targets)``, both (N, T) int64 on the CPU, built
with vectorised torch ops from a local ``torch.Generator(seed)`` (never the global RNG),
so ``generate(options, n, seed)`` is exactly reproducible. ``targets[i, t]`` is the token
the model must predict from ``inputs[i, :t+1]`` (its logits at position t) at answer
positions, and ``IGNORE`` (-100) everywhere else, so loss and accuracy see answers only.
The generators live in ``attnbench.plugins.tasks.synthetic_data``; this module holds the options
and registers the tasks without importing torch.

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

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl
from attnbench.plugins.tasks.checks import check_int, check_prob

if TYPE_CHECKING:
    pass


# MQAR -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MQAROptions:
    """vocab_size: V (keys from [1, V//2), values from [V//2, V)); seq_len: T;
    num_kv_pairs: K; power_a: power-law exponent of the query gaps (1 = uniform, small =
    queries cluster right after the pairs); random_non_queries: fill the other positions
    with uniform tokens from [0, V) (else token 0)."""

    vocab_size: int = 8192
    seq_len: int = 64
    num_kv_pairs: int = 4
    power_a: float = 0.01
    random_non_queries: bool = True

    def __post_init__(self) -> None:
        check_int("num_kv_pairs", self.num_kv_pairs, 1)
        check_int("seq_len", self.seq_len, 4)
        check_int("vocab_size", self.vocab_size, 4)
        check_recall_layout(self.vocab_size, self.seq_len, self.num_kv_pairs, self.vocab_size // 2 - 1)
        if (
            isinstance(self.power_a, bool)
            or not isinstance(self.power_a, (int, float))
            or not (math.isfinite(self.power_a) and self.power_a > 0)
        ):
            raise ValueError(f"power_a must be a finite number > 0, got {self.power_a!r}")
        if not isinstance(self.random_non_queries, bool):
            raise ValueError(f"random_non_queries must be true or false, got {self.random_non_queries!r}")


def check_recall_layout(vocab_size: int, seq_len: int, k: int, key_pool: int) -> None:
    if 4 * k > seq_len:
        raise ValueError(
            f"num_kv_pairs={k} needs seq_len >= 4*num_kv_pairs = {4 * k} (2K tokens of pairs, then "
            f"K queries on distinct even gaps), got seq_len={seq_len}"
        )
    if key_pool < k or vocab_size - vocab_size // 2 < k:
        raise ValueError(
            f"vocab_size={vocab_size} leaves {key_pool} distinct keys and {vocab_size - vocab_size // 2} "
            f"values; num_kv_pairs={k} needs at least {k} of each: raise vocab_size"
        )


# Noisy (fuzzy) recall ---------------------------------------------------------------------


@dataclass(frozen=True)
class NoisyRecallOptions:
    """MQAR whose keys are neighbourhoods of tokens rather than single tokens.

    The key half ``[1, V//2)`` is cut into blocks of ``neighbours`` consecutive tokens
    (block b = ``1 + b*m .. 1 + b*m + m-1``, m = neighbours; leftover tokens unused). Each
    example picks K distinct blocks; each pair shows a uniformly random member of its block.
    Each query shows, with probability ``noise_prob``, a uniformly random *other* member of
    the same block, else the very token shown in the pair. The target is the value bound to
    the block, which the query token identifies uniquely (blocks are distinct), so the
    answer is always well-defined. neighbours=1 (with noise_prob=0) is exactly MQAR's
    distribution; other fields are MQAR's.
    """

    vocab_size: int = 8192
    seq_len: int = 64
    num_kv_pairs: int = 4
    power_a: float = 0.01
    random_non_queries: bool = True
    neighbours: int = 4
    noise_prob: float = 0.5

    def __post_init__(self) -> None:
        check_int("neighbours", self.neighbours, 1)
        check_prob("noise_prob", self.noise_prob)
        if self.neighbours == 1 and self.noise_prob > 0:
            raise ValueError("noise_prob > 0 needs neighbours >= 2 (a block of one token has no other member)")
        MQAROptions(self.vocab_size, self.seq_len, self.num_kv_pairs, self.power_a, self.random_non_queries)
        blocks = (self.vocab_size // 2 - 1) // self.neighbours
        if blocks < self.num_kv_pairs:
            raise ValueError(
                f"vocab_size={self.vocab_size} with neighbours={self.neighbours} gives {blocks} key blocks; "
                f"num_kv_pairs={self.num_kv_pairs} needs at least that many: raise vocab_size or lower neighbours"
            )


# Selective copying ------------------------------------------------------------------------

BLANK, SEPARATOR = 0, 1  # selective-copy special tokens; data tokens are [2, V)


@dataclass(frozen=True)
class SelectiveCopyOptions:
    """Layout (T = seq_len, n = num_tokens, R = T - n): positions 0..R-1 are blank (token 0)
    except n data tokens (iid from [2, V)) at n random distinct positions; position R is
    the separator (token 1); positions R+1..T-1 repeat the data tokens 1..n-1 (teacher
    forcing). Targets at R..T-1 are data tokens 1..n in order; everything else is IGNORE."""

    vocab_size: int = 16
    seq_len: int = 64
    num_tokens: int = 8

    def __post_init__(self) -> None:
        check_int("num_tokens", self.num_tokens, 1)
        check_int("vocab_size", self.vocab_size, 3)
        check_int("seq_len", self.seq_len, 2)
        if self.seq_len < 2 * self.num_tokens:
            raise ValueError(
                f"num_tokens={self.num_tokens} needs seq_len >= 2*num_tokens = {2 * self.num_tokens} "
                f"(a region holding the tokens, then their copy), got seq_len={self.seq_len}"
            )


# Induction recall -------------------------------------------------------------------------


@dataclass(frozen=True)
class InductionOptions:
    """Layout (T = seq_len, G = num_triggers, H = T//2): G distinct trigger tokens drawn
    from [0, V), each followed by its answer token at pair slots (even positions 2s, 2s+1)
    of the first half; then each trigger once more at a random distinct position of the
    second half [H, T), where the target is its answer. Every other token (and each answer)
    is uniform over the non-trigger tokens, so each trigger occurs exactly twice and the
    answer is well-defined. G=1 is the classic induction-head task."""

    vocab_size: int = 64
    seq_len: int = 64
    num_triggers: int = 1

    def __post_init__(self) -> None:
        check_int("num_triggers", self.num_triggers, 1)
        check_int("seq_len", self.seq_len, 4)
        check_int("vocab_size", self.vocab_size, 3)
        G, T = self.num_triggers, self.seq_len
        if (T // 2) // 2 < G or T - T // 2 < G:
            raise ValueError(
                f"num_triggers={G} needs seq_len >= 4*num_triggers = {4 * G} (G pairs in the "
                f"first half, G queries in the second), got seq_len={T}"
            )
        if self.vocab_size < G + 2:
            raise ValueError(
                f"vocab_size={self.vocab_size} must exceed num_triggers + 1 = {G + 1} "
                f"(distinct triggers plus at least two other tokens)"
            )


# Registration -----------------------------------------------------------------------------

DATA = "attnbench.plugins.tasks.synthetic_data"  # torch: imported when the first batch is made


def _vocab(options: Any) -> int:
    return options.vocab_size


def _seq_len(options: Any) -> int:
    return options.seq_len


def _coords(*names: str):
    def coords(options: Any) -> dict[str, Any]:
        d = asdict(options)
        return {k: d[k] for k in names}

    return coords


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
            f"{DATA}:generate_mqar",
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
            f"{DATA}:generate_noisy_recall",
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
            f"{DATA}:generate_selective_copy",
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
            f"{DATA}:generate_induction",
            coords=_coords("num_triggers", "seq_len", "vocab_size"),
            description="induction recall: a trigger's earlier successor, when the trigger reappears",
            guess_accuracy=lambda o, _batch: 1.0 / (o.vocab_size - o.num_triggers),
            guess_rule="uniform over the V - G non-trigger tokens (answers are drawn uniformly from them)",
            null_predictors=None,  # all: none finds the trigger's earlier occurrence
            **common,
        )
    )
