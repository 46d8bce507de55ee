"""Options of the needle tasks (``needle``), free of torch: the registration registers them,
the generator (``needle_data``) reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from attnbench import NEEDLE_DEFAULTS, NEEDLE_KINDS, layout_chars

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
