"""Options of MAD's tasks (``mad``), their checks and special tokens, free of torch: the
registration registers them, the generators (``mad_data``) read them."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.plugins.tasks.checks import check_int, check_prob


def _check_even(name: str, value: int) -> None:
    if value % 2:
        raise ValueError(f"{name} must be even (pairs of tokens), got {value}")


# In-context recall (and its noisy form) -----------------------------------------------------


@dataclass(frozen=True)
class RecallOptions:
    """vocab_size: V (keys [0, Vk), values [Vk, 2Vk) with Vk = (V - noise_vocab_size)//2,
    noise tokens the top noise_vocab_size); seq_len: T (even: T/2 pairs)."""

    vocab_size: int = 16
    seq_len: int = 128
    noise_vocab_size: int = 0
    frac_noise: float = 0.0

    def __post_init__(self) -> None:
        check_int("seq_len", self.seq_len, 4)
        _check_even("seq_len", self.seq_len)
        check_int("noise_vocab_size", self.noise_vocab_size, 0)
        check_int("vocab_size", self.vocab_size, 4)
        if self.vocab_size - self.noise_vocab_size < 4:  # 2 keys and 2 values at least, beside the noise
            raise ValueError(
                f"noise_vocab_size {self.noise_vocab_size} leaves {self.vocab_size - self.noise_vocab_size} of "
                f"vocab_size {self.vocab_size} tokens for keys and values, and recall needs at least 4; "
                f"use noise_vocab_size <= {self.vocab_size - 4} or vocab_size >= {self.noise_vocab_size + 4}"
            )
        check_prob("frac_noise", self.frac_noise)
        if self.frac_noise >= 1:
            raise ValueError(f"frac_noise must be < 1 (some pairs must be real), got {self.frac_noise}")
        if self.frac_noise > 0 and self.noise_vocab_size == 0:
            raise ValueError("frac_noise > 0 needs noise_vocab_size >= 1 (noise tokens to draw from)")


@dataclass(frozen=True)
class NoisyRecallOptions(RecallOptions):
    """MAD's noisy recall baseline: 16 of V=32 tokens are noise, 20% of pairs are noise."""

    vocab_size: int = 32
    noise_vocab_size: int = 16
    frac_noise: float = 0.2


# Fuzzy in-context recall ---------------------------------------------------------------------


@dataclass(frozen=True)
class FuzzyRecallOptions:
    """vocab_size: V (pad V-1; keys [0, Vk), values [Vk, 2Vk), Vk = (V-1)//2); seq_len: T;
    key_len / value_len: the longest key / value motif (lengths uniform in 1..max per pair)."""

    vocab_size: int = 16
    seq_len: int = 128
    key_len: int = 3
    value_len: int = 3

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, 5)
        check_int("key_len", self.key_len, 1)
        check_int("value_len", self.value_len, 1)
        check_int("seq_len", self.seq_len, 4)
        if ((self.vocab_size - 1) // 2) ** self.key_len * self.key_len >= 2**62:
            raise ValueError(
                f"key_len={self.key_len} with vocab_size={self.vocab_size} gives more key motifs than int64 "
                "codes can tell apart; lower key_len"
            )
        if self.seq_len < 3 * (self.key_len + self.value_len):
            raise ValueError(
                f"seq_len={self.seq_len} must be >= 3*(key_len+value_len) = {3 * (self.key_len + self.value_len)} "
                "(room for pairs and the final query); raise seq_len or shorten the motifs"
            )


# Compression ----------------------------------------------------------------------------------

BLANK, COMPRESS = 0, 1  # compression special tokens; data tokens are [2, V)


@dataclass(frozen=True)
class CompressionOptions:
    """vocab_size: V (data tokens [2, V)); seq_len: T (even): T/2 tokens are compressed."""

    vocab_size: int = 16
    seq_len: int = 64

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, 4)
        check_int("seq_len", self.seq_len, 4)
        _check_even("seq_len", self.seq_len)


# Memorization ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorizationOptions:
    """vocab_size: V (insert token V-1; keys [0, Vk), values [Vk, 2Vk), Vk = (V-1)//2);
    seq_len: T (even: T/2 key-insert pairs); map_seed: seed of the fixed key->value map."""

    vocab_size: int = 256
    seq_len: int = 32
    map_seed: int = 12345

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, 5)
        check_int("seq_len", self.seq_len, 2)
        _check_even("seq_len", self.seq_len)
        check_int("map_seed", self.map_seed, 0)
