"""The synthetic recall tasks' generators (registered by ``attnbench.plugins.tasks.synthetic``,
which imports this module on first use and holds the options, their layouts and validation).

Every generator is vectorised torch on the CPU with a local ``torch.Generator(seed)`` (never
the global RNG), so ``generate(options, n, seed)`` is exactly reproducible. The sampling
helpers (``distinct``, ``power_law_gaps``, ``sample_excluding``) are public: other task
plugins may build on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from attnbench import IGNORE, TaskBatch
from attnbench.plugins.tasks.checks import check_int
from attnbench.plugins.tasks.synthetic import BLANK, SEPARATOR

if TYPE_CHECKING:
    from attnbench.plugins.tasks.synthetic import (
        InductionOptions,
        MQAROptions,
        NoisyRecallOptions,
        SelectiveCopyOptions,
    )

# Sampling helpers ------------------------------------------------------------------------


def _generator(n: int, seed: int) -> torch.Generator:
    check_int("n (number of examples)", n, 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


def distinct(gen: torch.Generator, n: int, k: int, low: int, high: int) -> torch.Tensor:
    """(n, k) integers from [low, high), distinct within each row, uniform over ordered
    k-tuples (so also in random order)."""
    pool = high - low
    if pool <= 4 * k:
        # Dense: the ranking of iid uniforms is a uniform permutation; keep its top k.
        return torch.rand(n, pool, generator=gen).topk(k, dim=1).indices + low  # (n, k)
    # Sparse: iid draws; redraw every element equal to an earlier one in its row until none
    # is (each redraw succeeds with P > 3/4). The rule only compares values for equality,
    # so the result's law is invariant under relabelling values, hence uniform.
    out = torch.randint(low, high, (n, k), generator=gen)  # (n, k)
    rows = torch.arange(n)  # (r,) rows that may still hold duplicates
    while k > 1 and rows.numel():
        sub = out[rows]  # (r, k)
        dup = _later_duplicates(sub)  # (r, k)
        live = dup.any(dim=1)  # (r,)
        rows, sub, dup = rows[live], sub[live], dup[live]
        sub[dup] = torch.randint(low, high, (int(dup.sum()),), generator=gen)  # (d,) fresh draws
        out[rows] = sub
    return out


def _later_duplicates(x: torch.Tensor) -> torch.Tensor:
    """(r, k) -> (r, k) bool: True where the value already occurs earlier in its row."""
    k = x.size(1)
    if k <= 16:  # k(k-1)/2 comparisons per row beat a row-wise sort for small k
        earlier = torch.ones(k, k, dtype=torch.bool).tril(-1)  # (k, k) [j, i]: i < j
        return ((x[:, :, None] == x[:, None, :]) & earlier).any(dim=2)  # (r, k)
    s, order = x.sort(dim=1, stable=True)  # (r, k) equal values keep position order
    later = torch.zeros_like(s, dtype=torch.bool)  # (r, k) in sorted order
    later[:, 1:] = s[:, 1:] == s[:, :-1]
    return torch.zeros_like(later).scatter_(1, order, later)  # (r, k) back to positions


def power_law_gaps(gen: torch.Generator, n: int, k: int, space: int, power_a: float) -> torch.Tensor:
    """(n, k) distinct gaps from [0, space), drawn one after another without replacement
    with P(g) proportional to (g+1)^(power_a-1), as Zoology's MQAR queries."""
    g = torch.arange(1, space + 1, dtype=torch.float32)  # (space,)
    logw = (power_a - 1.0) * g.log()  # (space,) log weight (normaliser irrelevant for top-k)
    # Gumbel top-k = sequential weighted sampling without replacement; exponential draws are
    # clamped away from 0 so -log stays finite.
    e = torch.empty(n, space).exponential_(generator=gen).clamp_min(1e-30)  # (n, space)
    return (logw - e.log()).topk(k, dim=1).indices  # (n, k) in draw order


def sample_excluding(gen: torch.Generator, shape: tuple[int, int], high: int, excluded: torch.Tensor) -> torch.Tensor:
    """(n, m) tokens uniform over [0, high) minus each row's ``excluded`` (n, G) distinct
    tokens: draw u from [0, high - G), then skip past the sorted exclusions
    (the u-th allowed token is u + #{j : e_j - j <= u})."""
    e = excluded.sort(dim=1).values  # (n, G)
    shift = (e - torch.arange(e.size(1))).contiguous()  # (n, G) non-decreasing thresholds
    u = torch.randint(0, high - e.size(1), shape, generator=gen)  # (n, m)
    return u + torch.searchsorted(shift, u, right=True)  # (n, m)


# MQAR -------------------------------------------------------------------------------------


def recall_batch(gen: torch.Generator, n: int, o: Any, keys: torch.Tensor, query_keys: torch.Tensor) -> TaskBatch:
    """Shared MQAR layout: ``keys`` (n, K) shown in the pairs, ``query_keys`` (n, K) shown
    at the queries; the target at query j is the value bound to pair j."""
    V, T, K = o.vocab_size, o.seq_len, o.num_kv_pairs
    values = distinct(gen, n, K, V // 2, V)  # (n, K)
    gaps = power_law_gaps(gen, n, K, (T - 2 * K) // 2, float(o.power_a))  # (n, K)
    qpos = 2 * K + 2 * gaps  # (n, K) query positions
    inputs = torch.randint(0, V, (n, T), generator=gen) if o.random_non_queries else torch.zeros(n, T, dtype=torch.long)
    inputs[:, 0 : 2 * K : 2] = keys  # (n, K) k1 . k2 . ...
    inputs[:, 1 : 2 * K : 2] = values  # (n, K) . v1 . v2 ...
    inputs.scatter_(1, qpos, query_keys)  # (n, T) queries
    targets = torch.full((n, T), IGNORE, dtype=torch.long)  # (n, T)
    targets.scatter_(1, qpos, values)  # (n, T) value bound to each queried key
    return TaskBatch(inputs, targets)


def generate_mqar(options: MQAROptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    keys = distinct(gen, n, options.num_kv_pairs, 1, options.vocab_size // 2)  # (n, K)
    return recall_batch(gen, n, options, keys, keys)


# Noisy (fuzzy) recall ---------------------------------------------------------------------


def generate_noisy_recall(options: NoisyRecallOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    m, K = options.neighbours, options.num_kv_pairs
    blocks = distinct(gen, n, K, 0, (options.vocab_size // 2 - 1) // m)  # (n, K)
    member = torch.randint(0, m, (n, K), generator=gen)  # (n, K) offset shown in the pair
    noisy = torch.rand(n, K, generator=gen) < options.noise_prob  # (n, K)
    other = torch.randint(0, max(m - 1, 1), (n, K), generator=gen)  # (n, K) which other member
    query_member = torch.where(noisy, (member + 1 + other) % m, member)  # (n, K)
    keys = 1 + blocks * m + member  # (n, K) token shown in the pair
    return recall_batch(gen, n, options, keys, 1 + blocks * m + query_member)


# Selective copying ------------------------------------------------------------------------


def generate_selective_copy(options: SelectiveCopyOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    T, k = options.seq_len, options.num_tokens
    R = T - k  # region length; the copy starts at R
    pos = distinct(gen, n, k, 0, R).sort(dim=1).values  # (n, k) data positions, in order
    data = torch.randint(2, options.vocab_size, (n, k), generator=gen)  # (n, k)
    inputs = torch.full((n, T), BLANK, dtype=torch.long)  # (n, T)
    inputs.scatter_(1, pos, data)  # (n, T)
    inputs[:, R] = SEPARATOR
    inputs[:, R + 1 :] = data[:, :-1]  # (n, k-1) teacher-forced copy
    targets = torch.full((n, T), IGNORE, dtype=torch.long)  # (n, T)
    targets[:, R:] = data  # (n, k)
    return TaskBatch(inputs, targets)


# Induction recall -------------------------------------------------------------------------


def generate_induction(options: InductionOptions, n: int, seed: int) -> TaskBatch:
    gen = _generator(n, seed)
    T, V, G = options.seq_len, options.vocab_size, options.num_triggers
    H = T // 2
    triggers = distinct(gen, n, G, 0, V)  # (n, G)
    answers = sample_excluding(gen, (n, G), V, triggers)  # (n, G)
    inputs = sample_excluding(gen, (n, T), V, triggers)  # (n, T) filler without triggers
    first = 2 * distinct(gen, n, G, 0, H // 2)  # (n, G) trigger positions in the first half
    query = H + distinct(gen, n, G, 0, T - H)  # (n, G) recall positions in the second half
    inputs.scatter_(1, first, triggers)  # (n, T)
    inputs.scatter_(1, first + 1, answers)  # (n, T)
    inputs.scatter_(1, query, triggers)  # (n, T)
    targets = torch.full((n, T), IGNORE, dtype=torch.long)  # (n, T)
    targets.scatter_(1, query, answers)  # (n, T)
    return TaskBatch(inputs, targets)
