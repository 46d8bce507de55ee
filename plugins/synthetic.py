"""Synthetic recall tasks: MQAR, selective copying, induction recall, noisy (fuzzy) recall.

Every task returns ``TaskBatch(inputs, targets)``, both (N, T) int64 on the CPU, built
with vectorised torch ops from a local ``torch.Generator(seed)`` (never the global RNG),
so ``generate(options, n, seed)`` is exactly reproducible. ``targets[i, t]`` is the token
the model must predict from ``inputs[i, :t+1]`` (its logits at position t) at answer
positions, and ``IGNORE`` (-100) everywhere else, so loss and accuracy see answers only.

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
from typing import Any

import torch

from attnbench import IGNORE, Task, TaskBatch, hookimpl

# Sampling helpers ------------------------------------------------------------------------


def check_int(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError unless value is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_prob(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


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


_ONE_OF_K = "uniform over the K distinct values shown in the pairs"


@hookimpl
def attnbench_register_tasks(register) -> None:
    common: dict[str, Any] = {"vocab_size": _vocab, "seq_len": _seq_len, "version": "1"}
    register(
        Task(
            "mqar",
            MQAROptions,
            generate_mqar,
            coords=_coords("num_kv_pairs", "seq_len", "vocab_size"),
            description="Zoology multi-query associative recall (power-law query gaps)",
            guess_accuracy=lambda o, _batch: 1.0 / o.num_kv_pairs,
            guess_rule=_ONE_OF_K,
            **common,
        )
    )
    register(
        Task(
            "noisy_recall",
            NoisyRecallOptions,
            generate_noisy_recall,
            coords=_coords("num_kv_pairs", "seq_len", "vocab_size", "neighbours", "noise_prob"),
            description="MQAR with fuzzy keys: queries show a neighbour of the key token",
            guess_accuracy=lambda o, _batch: 1.0 / o.num_kv_pairs,
            guess_rule=_ONE_OF_K,
            **common,
        )
    )
    register(
        Task(
            "selective_copy",
            SelectiveCopyOptions,
            generate_selective_copy,
            coords=_coords("num_tokens", "seq_len", "vocab_size"),
            description="copy the data tokens scattered among blanks, in order, after a separator",
            guess_accuracy=lambda o, _batch: 1.0 / (o.vocab_size - 2),
            guess_rule="uniform over the V - 2 data tokens (drawn independently of everything shown)",
            **common,
        )
    )
    register(
        Task(
            "induction",
            InductionOptions,
            generate_induction,
            coords=_coords("num_triggers", "seq_len", "vocab_size"),
            description="induction recall: a trigger's earlier successor, when the trigger reappears",
            guess_accuracy=lambda o, _batch: 1.0 / (o.vocab_size - o.num_triggers),
            guess_rule="uniform over the V - G non-trigger tokens (answers are drawn uniformly from them)",
            **common,
        )
    )
