"""Options of the synthetic recall tasks (``synthetic``), their layouts' checks and special
tokens, free of torch: the registration registers them, the generators (``synthetic_data``)
read them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnbench.plugins.tasks.checks import check_int, check_prob

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
