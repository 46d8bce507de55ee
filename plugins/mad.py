"""MAD's synthetic tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid
Architectures", MAD-lab) in attnbench's language-model framing.

Every task returns ``TaskBatch(inputs, targets)``, (N, T) int64, generated with vectorised
torch ops from a local ``torch.Generator(seed)``; ``targets[i, t]`` is the token predicted
from ``inputs[i, :t+1]`` at answer positions and ``IGNORE`` everywhere else. T (``seq_len``)
is always the model's input length. MAD's sixth task, selective copying, is the existing
``selective_copy`` task (plugins/synthetic.py).

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
from typing import Any

import torch

from attnbench import IGNORE, Task, TaskBatch, hookimpl
from attnbench.plugins.synthetic import check_int, check_prob


def _generator(n: int, seed: int) -> torch.Generator:
    check_int("n (number of examples)", n, 0)
    check_int("seed", seed, -(2**63))
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


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


def generate_recall(options: RecallOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    V, T, Vz = options.vocab_size, options.seq_len, options.noise_vocab_size
    Vk, P = (V - Vz) // 2, T // 2  # keys [0, Vk), values [Vk, 2Vk); P pairs
    rows = torch.arange(n)
    keys = torch.randint(0, Vk, (n, P), generator=gen)  # (n, P)
    table = torch.randint(Vk, 2 * Vk, (n, Vk), generator=gen)  # (n, Vk) each key's value here
    noise = torch.rand(n, P, generator=gen) < options.frac_noise  # (n, P)
    noise[rows, torch.randint(0, P - 1, (n,), generator=gen)] = False  # >= 1 real pair before the last
    noise[:, -1] = False
    earlier = torch.multinomial((~noise[:, :-1]).float(), 1, generator=gen)  # (n, 1) a real pair
    keys[:, -1:] = keys.gather(1, earlier)  # the last pair repeats it: >= 1 query per example
    values = table.gather(1, keys)  # (n, P)
    seen = torch.zeros(n, Vk, dtype=torch.bool)  # (n, Vk) keys shown in a real pair so far
    query = torch.zeros(n, P, dtype=torch.bool)  # (n, P) real pair whose key was shown before
    for j in range(P):
        real = ~noise[:, j]
        query[:, j] = seen[rows, keys[:, j]] & real
        seen[rows, keys[:, j]] |= real
    inputs = torch.empty(n, T, dtype=torch.long)  # (n, T)
    inputs[:, 0::2], inputs[:, 1::2] = keys, values
    if Vz:
        filler = torch.randint(V - Vz, V, (n, T), generator=gen)  # (n, T) noise tokens
        inputs = torch.where(noise.repeat_interleave(2, dim=1), filler, inputs)
    targets = torch.full((n, T), IGNORE, dtype=torch.long)  # (n, T)
    targets[:, 0::2] = torch.where(query, values, IGNORE)  # at a repeated key: its value
    return TaskBatch(inputs, targets)


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


def _first_occurrence(codes: torch.Tensor) -> torch.Tensor:
    """(n, P) -> (n, P): index of the first pair in the row with the same code."""
    s, order = codes.sort(dim=1, stable=True)  # (n, P) equal codes keep pair order
    start = torch.ones_like(s, dtype=torch.bool)
    start[:, 1:] = s[:, 1:] != s[:, :-1]  # (n, P) first of a run of equal codes
    at = torch.where(start, torch.arange(s.size(1)).expand_as(s), 0).cummax(dim=1).values  # (n, P)
    return torch.empty_like(order).scatter_(1, order, order.gather(1, at))


def _then_row(x: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    """(n, P, ...) -> (n, P+1, ...): ``x`` with its pair ``row`` (n, 1) appended."""
    index = row.view(row.size(0), 1, *[1] * (x.dim() - 2)).expand(x.size(0), 1, *x.shape[2:])
    return torch.cat([x, x.gather(1, index)], dim=1)


def generate_fuzzy_recall(options: FuzzyRecallOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    V, T, K, M = options.vocab_size, options.seq_len, options.key_len, options.value_len
    Vk, W, P = (V - 1) // 2, K + M, T // 2  # W: slots per pair; P: pairs drawn (>= what fits)
    lk = torch.randint(1, K + 1, (n, P), generator=gen)  # (n, P) key lengths
    slot = torch.arange(K)  # (K,)
    ktok = torch.randint(0, Vk, (n, P, K), generator=gen) * (slot < lk[..., None])  # (n, P, K) unused slots 0
    codes = (ktok * Vk**slot).sum(-1) * K + (lk - 1)  # (n, P) one int64 code per (length, tokens)
    first = _first_occurrence(codes)  # (n, P)
    lv = torch.randint(1, M + 1, (n, P), generator=gen).gather(1, first)  # (n, P) a key's value motif is fixed
    vtok = torch.randint(Vk, 2 * Vk, (n, P, M), generator=gen).gather(1, first[..., None].expand(n, P, M))
    length = lk + lv  # (n, P)
    kept = length.cumsum(1) <= T - W  # (n, P) pairs that fit before the final query
    probe = torch.multinomial(kept.float(), 1, generator=gen)  # (n, 1) a kept pair, repeated last
    lk, lv, ktok, vtok, length = (_then_row(x, probe) for x in (lk, lv, ktok, vtok, length))  # (n, P+1, ...)
    kept = torch.cat([kept, torch.ones(n, 1, dtype=torch.bool)], 1)  # (n, P+1)
    query = torch.cat([first < torch.arange(P), torch.ones(n, 1, dtype=torch.bool)], 1)  # (n, P+1) repeats
    length = length * kept
    pad = T - length.sum(1, keepdim=True)  # (n, 1) left padding that right-aligns the row
    start = pad + length.cumsum(1) - length  # (n, P+1) first position of each pair
    s = torch.arange(W)  # (W,) slot within a pair: key tokens, then value tokens
    is_key = s < lk[..., None]  # (n, P+1, W)
    used = (s < length[..., None]) & kept[..., None]  # (n, P+1, W)
    tok = torch.where(is_key, ktok.gather(2, s.clamp(max=K - 1).expand(n, P + 1, W)), 0)
    vslot = (s - lk[..., None]).clamp(0, M - 1)  # (n, P+1, W)
    tok = torch.where(is_key, tok, vtok.gather(2, vslot))  # (n, P+1, W)
    pos = torch.where(used, start[..., None] + s, T).view(n, -1)  # (n, (P+1)W); T is a dump column
    inputs = torch.full((n, T + 1), V - 1, dtype=torch.long).scatter_(1, pos, tok.view(n, -1))[:, :T]
    answer = used & ~is_key & query[..., None]  # (n, P+1, W) value tokens of a repeated key
    tpos = torch.where(answer, start[..., None] + s - 1, T).view(n, -1)  # predicted one position earlier
    targets = torch.full((n, T + 1), IGNORE, dtype=torch.long).scatter_(1, tpos, tok.view(n, -1))[:, :T]
    return TaskBatch(inputs, targets)


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


def generate_compression(options: CompressionOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    T, L = options.seq_len, options.seq_len // 2
    data = torch.randint(2, options.vocab_size, (n, L), generator=gen)  # (n, L)
    inputs = torch.full((n, T), BLANK, dtype=torch.long)  # (n, T)
    inputs[:, :L] = data
    inputs[:, L] = COMPRESS
    targets = torch.full((n, T), IGNORE, dtype=torch.long)  # (n, T)
    targets[:, L:] = data  # from the compression token on: the tokens in order
    return TaskBatch(inputs, targets)


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


def memorization_map(options: MemorizationOptions) -> torch.Tensor:
    """(Vk,) the value of each key: a bijection onto [Vk, 2Vk), fixed by map_seed alone."""
    Vk = (options.vocab_size - 1) // 2
    return Vk + torch.randperm(Vk, generator=_generator(0, options.map_seed))


def generate_memorization(options: MemorizationOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    V, T = options.vocab_size, options.seq_len
    keys = torch.randint(0, (V - 1) // 2, (n, T // 2), generator=gen)  # (n, T/2)
    inputs = torch.full((n, T), V - 1, dtype=torch.long)  # (n, T) insert tokens at odd positions
    inputs[:, 0::2] = keys
    targets = torch.full((n, T), IGNORE, dtype=torch.long)  # (n, T)
    targets[:, 1::2] = memorization_map(options)[keys]  # at each insert token: the key's value
    return TaskBatch(inputs, targets)


# Registration ---------------------------------------------------------------------------------


def _coords(*names: str):
    def coords(options: Any) -> dict[str, Any]:
        d = asdict(options)
        return {k: d[k] for k in names}

    return coords


def _task(
    name: str, options: type, generate: Any, coords: tuple[str, ...], description: str, guess: tuple[Any, str] | None
) -> Task:
    """``guess``: (declared guessing accuracy from the options, its rule in words); None: measured."""
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
    )


# Values are uniform over Vk tokens and independent of what is shown, so no guess beats 1/Vk.
_RECALL_GUESS = (lambda o: 1.0 / ((o.vocab_size - o.noise_vocab_size) // 2), "uniform over the Vk values")
_COMPRESSION_GUESS = (lambda o: 1.0 / (o.vocab_size - 2), "uniform over the V - 2 data tokens")
_MEMORIZATION_GUESS = (lambda o: 1.0 / ((o.vocab_size - 1) // 2), "uniform over the Vk values (the map unknown)")


@hookimpl
def attnbench_register_tasks(register) -> None:
    base = ("vocab_size", "seq_len")
    register(
        _task(
            "mad_recall",
            RecallOptions,
            generate_recall,
            base,
            "MAD in-context recall (every repeat queried)",
            _RECALL_GUESS,
        )
    )
    register(
        _task(
            "mad_noisy_recall",
            NoisyRecallOptions,
            generate_recall,
            (*base, "noise_vocab_size", "frac_noise"),
            "MAD noisy recall: in-context recall with pairs of noise tokens",
            _RECALL_GUESS,
        )
    )
    register(
        _task(
            "mad_fuzzy_recall",
            FuzzyRecallOptions,
            generate_fuzzy_recall,
            (*base, "key_len", "value_len"),
            "MAD fuzzy recall: keys and values of 1..key_len / 1..value_len tokens",
            None,  # motifs of varying length: measured
        )
    )
    register(
        _task(
            "mad_compression",
            CompressionOptions,
            generate_compression,
            base,
            "MAD compression (LM framing): reproduce T/2 tokens after a compression token",
            _COMPRESSION_GUESS,
        )
    )
    register(
        _task(
            "mad_memorization",
            MemorizationOptions,
            generate_memorization,
            base,
            "MAD memorization: a fixed key->value map recalled without context",
            _MEMORIZATION_GUESS,
        )
    )
