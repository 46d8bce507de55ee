"""MAD's task generators (registered by ``attnbench.plugins.tasks.mad``, which imports this module
on first use; the options, their validation and the layouts in words are in ``mad``).

Every generator is vectorised torch from a local ``torch.Generator(seed)``, so
``generate(options, n, seed)`` is exactly reproducible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from attnbench import IGNORE, TaskBatch
from attnbench.plugins.tasks.checks import check_int
from attnbench.plugins.tasks.mad import BLANK, COMPRESS

if TYPE_CHECKING:
    from attnbench.plugins.tasks.mad import (
        CompressionOptions,
        FuzzyRecallOptions,
        MemorizationOptions,
        RecallOptions,
    )


def _generator(n: int, seed: int) -> torch.Generator:
    check_int("n (number of examples)", n, 0)
    check_int("seed", seed, -(2**63))
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


# In-context recall (and its noisy form) -----------------------------------------------------


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
