"""Needle retrieval (RULER's S-NIAH family) as byte-level tasks, generated offline.

* ``niah_passkey`` (S-NIAH-1): a digit pass key in a repeated-sentence haystack;
* ``niah_number`` (S-NIAH-2): a 7-digit number in natural text (the shipped corpus);
* ``niah_uuid`` (S-NIAH-3): a UUID-like hex code ("3f2a-9c1e") in natural text.

Each example is ``seq_len + 1`` bytes of text (layout: ``attnbench.data.needle``): the
haystack holding ``n_keys`` needles, then the question, then the queried value. Inputs are
the first ``seq_len`` bytes, targets the next byte, and only the value's bytes are scored,
so accuracy is per answer byte; an example counts as retrieved when all its answer bytes
are right under teacher forcing (the ``exact`` rows of a length evaluation). The generator
lives in ``attnbench.plugins.tasks.needle_data``; this module holds the options and registers the
tasks without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench import NEEDLE_DEFAULTS, NEEDLE_KINDS, Task, hookimpl, layout_chars

if TYPE_CHECKING:
    pass


DATA = "attnbench.plugins.tasks.needle_data"  # torch: imported when the first batch is made

HAYSTACKS = ("repeat", "corpus")


def check_int(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError unless value is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_depth(depth: Any) -> tuple[float, ...] | float:
    """A depth in [0, 1], or a non-empty list of them (sampled per example)."""
    values = list(depth) if isinstance(depth, (list, tuple)) else [depth]
    if not values:
        raise ValueError("depth must be a number in [0, 1] or a non-empty list of them, got []")
    for d in values:
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 <= d <= 1.0:
            raise ValueError(f"depth must be a number in [0, 1] or a list of them, got {d!r}")
    return tuple(float(d) for d in values) if isinstance(depth, (list, tuple)) else float(depth)


@dataclass(frozen=True)
class NeedleOptions:
    """seq_len: bytes of input; depth: where the queried needle sits (0 = start of the context,
    1 = just before the question), or a list to draw from per example; n_keys: needles per
    example (one queried, the rest distractors with other keys); value_len: symbols of the value;
    haystack: "repeat" (one sentence repeated) or "corpus" (the shipped corpus)."""

    KIND: ClassVar[str] = "passkey"
    seq_len: int = 128
    depth: Any = 0.5
    n_keys: int = 1
    value_len: int = NEEDLE_DEFAULTS["passkey"][0]
    haystack: str = NEEDLE_DEFAULTS["passkey"][1]

    def __post_init__(self) -> None:
        check_int("seq_len", self.seq_len, 8)
        check_int("n_keys", self.n_keys, 1)
        check_int("value_len", self.value_len, 1)
        object.__setattr__(self, "depth", check_depth(self.depth))
        if self.haystack not in HAYSTACKS:
            raise ValueError(f"haystack must be one of {HAYSTACKS}, got {self.haystack!r}")
        need = layout_chars(NEEDLE_KINDS[self.KIND], self.value_len, self.n_keys)
        if need > self.seq_len + 1:
            raise ValueError(
                f"{self.n_keys} needle(s), question and answer take {need} bytes and seq_len is {self.seq_len}: "
                f"set seq_len >= {need - 1}, or lower n_keys / value_len"
            )


@dataclass(frozen=True)
class NumberOptions(NeedleOptions):
    KIND: ClassVar[str] = "number"
    value_len: int = NEEDLE_DEFAULTS["number"][0]
    haystack: str = NEEDLE_DEFAULTS["number"][1]


@dataclass(frozen=True)
class UuidOptions(NeedleOptions):
    KIND: ClassVar[str] = "uuid"
    value_len: int = NEEDLE_DEFAULTS["uuid"][0]
    haystack: str = NEEDLE_DEFAULTS["uuid"][1]


BYTE_VOCAB = 256


def coords(options: NeedleOptions) -> dict[str, Any]:
    depth = options.depth if not isinstance(options.depth, tuple) else "mixed"
    return {"seq_len": options.seq_len, "depth": depth, "n_keys": options.n_keys}


# Null predictors: the position majority and the most frequent answer byte seen so far. The copy
# predictors are left out: at a fixed depth the value sits at fixed positions, so copying from
# there (copy_by_rank scores 1.0 at depth 0) is the retrieval under test, not a null.
_NULLS = ("position_majority", "answer_frequency")


def _task(name: str, options: type[NeedleOptions], description: str) -> Task:
    return Task(
        name,
        options,
        f"{DATA}:generate",
        vocab_size=lambda o: BYTE_VOCAB,
        seq_len=lambda o: o.seq_len,
        description=description,
        coords=coords,
        version="1",
        tokens="bytes",
        null_predictors=_NULLS,
    )


@hookimpl
def attnbench_register_tasks(register) -> None:
    register(_task("niah_passkey", NeedleOptions, "S-NIAH-1: a digit pass key in a repeated-sentence haystack"))
    register(_task("niah_number", NumberOptions, "S-NIAH-2: a 7-digit number in natural text (shipped corpus)"))
    register(_task("niah_uuid", UuidOptions, "S-NIAH-3: a UUID-like hex code in natural text (shipped corpus)"))
