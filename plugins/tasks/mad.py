"""MAD's synthetic tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid
Architectures", MAD-lab) in attnbench's language-model framing.

Every task returns ``TaskBatch(inputs, targets)``, (N, T) int64, generated with vectorised
torch ops from a local ``torch.Generator(seed)``; ``targets[i, t]`` is the token predicted
from ``inputs[i, :t+1]`` at answer positions and ``IGNORE`` everywhere else. T (``seq_len``)
is always the model's input length. MAD's sixth task, selective copying, is the existing
``selective_copy`` task (plugins/tasks/synthetic.py). The generators live in
``attnbench.plugins.tasks.mad_data``; this module holds the options and registers the tasks
without importing torch.

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

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl
from attnbench.plugins.tasks.checks import check_int, check_prob

if TYPE_CHECKING:
    pass


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


# Registration ---------------------------------------------------------------------------------

DATA = "attnbench.plugins.tasks.mad_data"  # torch: imported when the first batch is made


def _coords(*names: str):
    def coords(options: Any) -> dict[str, Any]:
        d = asdict(options)
        return {k: d[k] for k in names}

    return coords


def _task(
    name: str,
    options: type,
    generate: str,
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
            f"{DATA}:generate_recall",
            base,
            "MAD in-context recall (every repeat queried)",
            _RECALL_GUESS,
        )
    )
    register(
        _task(
            "mad_noisy_recall",
            NoisyRecallOptions,
            f"{DATA}:generate_recall",
            (*base, "noise_vocab_size", "frac_noise"),
            "MAD noisy recall: in-context recall with pairs of noise tokens",
            _RECALL_GUESS,
        )
    )
    register(
        _task(
            "mad_fuzzy_recall",
            FuzzyRecallOptions,
            f"{DATA}:generate_fuzzy_recall",
            (*base, "key_len", "value_len"),
            "MAD fuzzy recall: keys and values of 1..key_len / 1..value_len tokens",
            None,  # motifs of varying length: no declared guess, the predictors alone
        )
    )
    register(
        _task(
            "mad_compression",
            CompressionOptions,
            f"{DATA}:generate_compression",
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
            f"{DATA}:generate_memorization",
            base,
            "MAD memorization: a fixed key->value map recalled without context",
            _MEMORIZATION_GUESS,
        )
    )
