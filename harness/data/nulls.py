"""Binding-free null predictors: what a synthetic task's answers give away without the
capability under test (for recall: no key-to-value matching).

Each predictor is fitted on training examples (at most ``MAX_TRAIN_EXAMPLES``, spread evenly
over the training set so a mixture of settings stays mixed) and scored on an evaluation batch:
its expected accuracy over the scored positions (targets != IGNORE). Every predictor reads only
the example's inputs up to and including the scored position, as a causal model does.

* ``position_majority``: the answer most often seen at that position in training.
* ``answer_frequency``: the answer-vocabulary token (a token seen as a training target) seen
  most often among the inputs so far; credit 1/|ties| when the answer is among the tied
  tokens. Where no answer-vocabulary token has appeared yet it falls back to the most
  frequent training answer.
* ``copy_by_rank``: for the example's r-th scored position, copy the input at one fixed
  absolute position j(r) <= t, the one whose token most often equals the answer in training
  (MQAR's "the r-th query asks the r-th pair").
* ``copy_by_rank_and_position``: the same with the table keyed by (r, scored position t),
  backing off to ``copy_by_rank`` for keys without training evidence.
* ``copy_by_offset``: copy the input at t - d, d >= 0 chosen per rank r in training.
* ``copy_by_layout``: the position-only Bayes rule: copy the input at the position j that most
  often held the answer in training among examples of the same layout: the same number of
  answers K (MQAR's pairs, shown by the key-value section before any query), rank r, position t
  and position of the previous answer; backing off to ``copy_by_rank_and_position``, then
  ``copy_by_rank``. It never looks a key up.

A copy predictor whose source lies after the scored position (or has no training evidence)
predicts nothing: no credit. The task's null level is the best of its predictors and of its
declared level, if it declares one (``null_level``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch

from attnbench.contract.task import IGNORE, NULL_PREDICTORS, TaskBatch

MAX_TRAIN_EXAMPLES = 2048  # training examples a predictor is fitted on
MAX_FIT_CELLS = 1 << 25  # ... and about this many (scored position, input position) pairs
LAYOUT_MIN_SUPPORT = 10  # training matches a layout key needs before copy_by_layout trusts it
_CHUNK = 1 << 22  # elements of one temporary (rows x T, or rows x T x answers) tensor
DECLARED = "declared"  # the name of a task's declared level among the candidates
DESCRIPTIONS = {
    "position_majority": "the majority training answer at each position",
    "answer_frequency": "the most frequent answer token seen so far",
    "copy_by_rank": "copy a fixed position per answer rank",
    "copy_by_rank_and_position": "copy a fixed position per (answer rank, position)",
    "copy_by_offset": "copy a fixed offset back per answer rank",
    "copy_by_layout": "copy a fixed position per (answers in the example, rank, position, previous answer's position)",
}
assert tuple(DESCRIPTIONS) == NULL_PREDICTORS  # the contract names them (torch-free); this module fits them

Credit = Callable[[TaskBatch], torch.Tensor]  # batch -> (S,) expected credit per scored position


@dataclass(frozen=True)
class NullLevel:
    """A task's null on one evaluation set: the best candidate's accuracy, its name and every
    candidate's accuracy (the predictors', and the declared level as ``"declared"``)."""

    value: float
    predictor: str
    levels: dict[str, float]


@dataclass(frozen=True)
class Scored:
    """The scored positions of a batch, example by example, in position order."""

    n: torch.Tensor  # (S,) example
    t: torch.Tensor  # (S,) position
    r: torch.Tensor  # (S,) rank among the example's scored positions
    y: torch.Tensor  # (S,) answer
    k: torch.Tensor  # (S,) answers in the example (its layout: MQAR's number of pairs)
    prev: torch.Tensor  # (S,) the previous answer's position + 1 (0 for the first answer)


def scored(batch: TaskBatch) -> Scored:
    mask = batch.targets != IGNORE  # (N, T)
    rank = mask.long().cumsum(dim=1) - 1  # (N, T)
    n, t = mask.nonzero(as_tuple=True)  # (S,), (S,) row-major: ranks ascend within an example
    r = rank[n, t]  # (S,)
    prev = torch.zeros_like(t)  # (S,)
    if t.numel() > 1:
        follows = r[1:] > 0  # (S - 1,) the same example's earlier answer precedes it
        prev[1:] = torch.where(follows, t[:-1] + 1, torch.zeros_like(t[1:]))
    return Scored(n, t, r, batch.targets[n, t], mask.sum(dim=1)[n], prev)


def training_subset(train: TaskBatch) -> TaskBatch:
    """At most ``MAX_TRAIN_EXAMPLES`` examples (fewer for long examples with many answers: about
    ``MAX_FIT_CELLS`` answer-input pairs, 64 examples at least), evenly spaced over ``train``
    (a mixture of settings is generated block by block)."""
    N, T = train.inputs.shape
    per = max(1.0, float((train.targets != IGNORE).sum()) / max(N, 1))  # answers per example
    keep = min(N, MAX_TRAIN_EXAMPLES, max(64, int(MAX_FIT_CELLS / (per * T))))
    if keep >= N:
        return train
    ix = torch.linspace(0, N - 1, keep).round().long()  # (keep,)
    return TaskBatch(train.inputs[ix], train.targets[ix])


# Position majority ------------------------------------------------------------------------


def majority_answers(targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(T,) the answer most often seen at each position of ``targets`` (N, T); where a position
    is never scored, the most common answer overall."""
    T = targets.size(1)
    mask = targets != IGNORE  # (N, T)
    pos = torch.arange(T).expand_as(targets)[mask]  # (S,)
    counts = torch.bincount(pos * vocab_size + targets[mask], minlength=T * vocab_size).view(T, vocab_size)
    best = counts.argmax(dim=1)  # (T,)
    return torch.where(counts.sum(dim=1) > 0, best, counts.sum(dim=0).argmax())


def _position_majority(train: TaskBatch, vocab: int) -> Credit:
    guess = majority_answers(train.targets, vocab)  # (T,)

    def credit(batch: TaskBatch) -> torch.Tensor:
        s = scored(batch)
        inside = s.t < guess.numel()  # (S,)
        return (inside & (guess[s.t.clamp(max=guess.numel() - 1)] == s.y)).double()  # (S,)

    return credit


# Answer frequency -------------------------------------------------------------------------


def _answer_frequency(train: TaskBatch, vocab: int) -> Credit:
    counts = torch.bincount(scored(train).y, minlength=vocab)  # (V,)
    answers = (counts > 0).nonzero().squeeze(1)  # (A,) the answer vocabulary
    index = torch.full((vocab,), -1, dtype=torch.long)  # (V,) token -> answer index, -1 if not one
    index[answers] = torch.arange(answers.numel())
    fallback = int(counts.argmax())
    A = answers.numel()

    def credit(batch: TaskBatch) -> torch.Tensor:
        s = scored(batch)
        N, T = batch.inputs.shape
        out = (s.y == fallback).double()  # (S,) where no answer token has appeared yet
        if A == 0:
            return out
        a_of = torch.where(batch.inputs < vocab, index[batch.inputs.clamp(0, vocab - 1)], -1)  # (N, T)
        a_of = torch.where(a_of < 0, A, a_of)  # (N, T) A: a dump column for other tokens
        y_of = torch.where(s.y < vocab, index[s.y.clamp(0, vocab - 1)], -1)  # (S,) -1: not an answer token
        step = max(1, _CHUNK // (T * (A + 1)))
        bounds = torch.searchsorted(s.n, torch.arange(0, N + step, step))  # scored range of each chunk
        for k, e0 in enumerate(range(0, N, step)):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            one = torch.zeros(min(step, N - e0), T, A + 1, dtype=torch.int32)  # (c, T, A+1)
            one.scatter_(2, a_of[e0 : e0 + step, :, None], 1)
            seen = one.cumsum(dim=1, dtype=torch.int32)[..., :A]  # (c, T, A) answer tokens so far
            c = seen[s.n[lo:hi] - e0, s.t[lo:hi]]  # (s', A)
            top = c.max(dim=1).values  # (s',)
            ties = c == top[:, None]  # (s', A)
            y = y_of[lo:hi]  # (s',)
            hit = ties.gather(1, y.clamp(min=0)[:, None]).squeeze(1) & (y >= 0)  # (s',)
            share = hit.double() / ties.sum(dim=1).double()  # (s',) 1/|ties| when the answer is tied
            out[lo:hi] = torch.where(top > 0, share, out[lo:hi])
        return out

    return credit


# Copy tables ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """The best source (an absolute position or an offset) per key, from training matches."""

    keys: torch.Tensor  # (K,) int64, sorted
    src: torch.Tensor  # (K,) int64
    support: torch.Tensor | None = None  # (K,) training matches of the winning source

    @classmethod
    def fit(cls, parts: list[tuple[torch.Tensor, torch.Tensor]], width: int) -> _Table:
        """``parts``: (codes key * width + source, counts) per chunk of training matches; the
        most frequent source per key wins, the smallest on ties."""
        if not parts:
            return cls(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))
        codes, inverse = torch.unique(torch.cat([c for c, _ in parts]), return_inverse=True)  # (U,)
        counts = torch.zeros(codes.numel(), dtype=torch.long).index_add_(0, inverse, torch.cat([n for _, n in parts]))
        key, src = codes // width, codes % width  # (U,) each, by key then source
        order = torch.argsort(-counts, stable=True)  # (U,) most matches first, ties by code
        order = order[torch.argsort(key[order], stable=True)]  # (U,) by key, then as above
        key, src = key[order], src[order]
        first = torch.ones_like(key, dtype=torch.bool)  # (U,)
        first[1:] = key[1:] != key[:-1]
        return cls(key[first], src[first], counts[order][first])

    def evidence(self, query: torch.Tensor) -> torch.Tensor:
        """(Q,) training matches behind each query key's source (0 where unseen)."""
        if self.keys.numel() == 0 or self.support is None:
            return torch.zeros_like(query)
        i = torch.searchsorted(self.keys, query).clamp(max=self.keys.numel() - 1)  # (Q,)
        return torch.where(self.keys[i] == query, self.support[i], torch.zeros_like(query))

    def lookup(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(found (Q,) bool, source (Q,)) for each query key."""
        if self.keys.numel() == 0:
            return torch.zeros_like(query, dtype=torch.bool), torch.zeros_like(query)
        i = torch.searchsorted(self.keys, query).clamp(max=self.keys.numel() - 1)  # (Q,)
        return self.keys[i] == query, self.src[i]


def _matches(batch: TaskBatch, s: Scored) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(scored index (M,), position j (M,)) of every input at j <= t equal to the answer at t."""
    T = batch.inputs.size(1)
    pos = torch.arange(T)  # (T,)
    step = max(1, _CHUNK // T)
    for a in range(0, s.y.numel(), step):
        n, t, y = s.n[a : a + step], s.t[a : a + step], s.y[a : a + step]  # (s',) each
        hit = (batch.inputs[n] == y[:, None]) & (pos <= t[:, None])  # (s', T)
        i, j = hit.nonzero(as_tuple=True)  # (M,), (M,)
        yield i + a, j


def _copy_credit(batch: TaskBatch, s: Scored, found: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """(S,) credit of copying the input at j (where found, and 0 <= j <= t) to each scored position."""
    ok = found & (j >= 0) & (j <= s.t)  # (S,)
    pred = batch.inputs[s.n, j.clamp(0, batch.inputs.size(1) - 1)]  # (S,)
    return (ok & (pred == s.y)).double()


def _layout_key(s: Scored, i: torch.Tensor | slice, T: int) -> torch.Tensor:
    """(M,) the layout key (answers in the example, rank, position, previous answer's position)."""
    return ((s.k[i] * T + s.r[i]) * T + s.t[i]) * (T + 1) + s.prev[i]


def _code(table: str, s: Scored, i: torch.Tensor, j: torch.Tensor, T: int) -> torch.Tensor:
    """(M,) key * T + source of each training match ``i``: key r, (r, t) or the layout, source j
    (or t - j for the offset table)."""
    r, t = s.r[i], s.t[i]  # (M,) each
    if table == "rank":
        return r * T + j
    if table == "rank_pos":
        return (r * T + t) * T + j
    if table == "layout":
        return _layout_key(s, i, T) * T + j
    return r * T + t - j  # offset


def _copy_predictors(train: TaskBatch, names: set[str]) -> dict[str, Credit]:
    """The copy predictors in ``names``, fitted in one pass over the training matches."""
    s = scored(train)
    T = train.inputs.size(1)
    most = int(s.k.max()) if s.k.numel() else 0
    layout = "copy_by_layout" in names and (most + 1) * T**4 * (T + 1) < 2**62  # int64 codes
    tables = {"rank"}  # copy_by_rank_and_position and copy_by_layout back off to it
    tables |= {"rank_pos"} if names & {"copy_by_rank_and_position", "copy_by_layout"} else set()
    tables |= {"offset"} if "copy_by_offset" in names else set()
    tables |= {"layout"} if layout else set()
    parts: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
        t: [] for t in ("rank", "rank_pos", "offset", "layout")
    }
    for i, j in _matches(train, s):
        for table in tables:
            parts[table].append(torch.unique(_code(table, s, i, j, T), return_counts=True))  # (U,), (U,)
    rank, rank_pos = _Table.fit(parts["rank"], T), _Table.fit(parts["rank_pos"], T)
    offset, by_layout_table = _Table.fit(parts["offset"], T), _Table.fit(parts["layout"], T)

    def by_rank(batch: TaskBatch) -> torch.Tensor:
        e = scored(batch)
        return _copy_credit(batch, e, *rank.lookup(e.r))

    def rank_and_position(e: Scored) -> tuple[torch.Tensor, torch.Tensor]:
        found, j = rank_pos.lookup(e.r * T + e.t)  # (S,) each
        found &= e.t < T  # a position past the training length is no key of the table
        back_found, back_j = rank.lookup(e.r)  # (S,) each: the backing-off table
        return found | back_found, torch.where(found, j, back_j)

    def by_rank_and_position(batch: TaskBatch) -> torch.Tensor:
        e = scored(batch)
        return _copy_credit(batch, e, *rank_and_position(e))

    def by_layout(batch: TaskBatch) -> torch.Tensor:
        e = scored(batch)
        fits = (e.t < T) & (e.prev <= T)  # (S,) a layout the training length can key
        query = torch.where(fits, _layout_key(e, slice(None), T), -1)  # (S,)
        found, j = by_layout_table.lookup(query)  # (S,) each
        found &= fits & (by_layout_table.evidence(query) >= LAYOUT_MIN_SUPPORT)  # else back off: too few to trust
        back_found, back_j = rank_and_position(e)
        return _copy_credit(batch, e, found | back_found, torch.where(found, j, back_j))

    def by_offset(batch: TaskBatch) -> torch.Tensor:
        e = scored(batch)
        found, d = offset.lookup(e.r)  # (S,) each
        return _copy_credit(batch, e, found, e.t - d)

    every = {
        "copy_by_rank": by_rank,
        "copy_by_rank_and_position": by_rank_and_position,
        "copy_by_offset": by_offset,
        "copy_by_layout": by_layout,
    }
    return {k: v for k, v in every.items() if k in names}


# Fitting and the null ---------------------------------------------------------------------


def fit_predictors(train: TaskBatch, vocab_size: int, names: Iterable[str] | None = None) -> dict[str, Credit]:
    """The predictors ``names`` (None: all of ``NULL_PREDICTORS``) fitted on ``train``."""
    wanted = list(NULL_PREDICTORS if names is None else names)
    unknown = sorted(set(wanted) - set(NULL_PREDICTORS))
    if unknown:
        raise ValueError(f"unknown null predictor(s) {unknown}; known: {list(NULL_PREDICTORS)}")
    train = training_subset(train)
    vocab = max(int(vocab_size), int(train.inputs.max()) + 1, int(train.targets.max()) + 1)
    fitted: dict[str, Credit] = {}
    if "position_majority" in wanted:
        fitted["position_majority"] = _position_majority(train, vocab)
    if "answer_frequency" in wanted:
        fitted["answer_frequency"] = _answer_frequency(train, vocab)
    if copies := {n for n in wanted if n.startswith("copy_")}:
        fitted |= _copy_predictors(train, copies)
    return {n: fitted[n] for n in wanted}


def accuracy(credit: Credit, batch: TaskBatch) -> float:
    """Expected accuracy of one fitted predictor over ``batch``'s scored positions (nan: none)."""
    c = credit(batch)  # (S,)
    return float(c.mean()) if c.numel() else math.nan


def null_level(fitted: dict[str, Credit], batch: TaskBatch, declared: float | None = None) -> NullLevel:
    """The best of the fitted predictors' accuracies on ``batch`` and the declared level;
    on a tie, the first predictor (the declared level last)."""
    levels = {name: accuracy(credit, batch) for name, credit in fitted.items()}
    if declared is not None:
        levels[DECLARED] = float(declared)
    finite = {k: v for k, v in levels.items() if not math.isnan(v)}
    if not finite:
        return NullLevel(math.nan, "", levels)
    best = max(finite, key=lambda k: finite[k])  # first of the maxima, in insertion order
    return NullLevel(finite[best], best, levels)


def describe(names: Iterable[str] | None) -> str:
    """'position_majority (the majority training answer at each position), ...'."""
    return ", ".join(f"{n} ({DESCRIPTIONS[n]})" for n in (NULL_PREDICTORS if names is None else names))
