"""Shapes a variant's builders need (``Variant.constraints``): `attnbench validate` states
them and refuses a suite's model size that breaks one, without building a model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnbench.contract.config import ModelConfig

# ModelConfig's whole-number fields and properties a ``multiple_of`` constraint may name
SIZE_FIELDS = ("vocab_size", "d_model", "n_layer", "n_head", "head_dim", "context", "mlp_width")


@dataclass(frozen=True)
class _MultipleOf:
    """``config.<name> % k == 0`` (a class, not a lambda: it pickles and reads in a traceback)."""

    name: str
    k: int

    def __call__(self, config: ModelConfig) -> bool:
        return getattr(config, self.name) % self.k == 0


@dataclass(frozen=True)
class ShapeConstraint:
    """One rule every model size of a variant must satisfy.

    rule: the rule as a reader writes it, over ``ModelConfig``'s fields ("head_dim % 2 == 0").
    holds: ``(config) -> bool``, whether ``config`` satisfies it (``config.options`` holds
        the variant's options).
    why: one sentence: what in the variant needs it.
    """

    rule: str
    holds: Callable[[ModelConfig], bool]
    why: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.rule, str) or not self.rule.strip():
            raise ValueError(f"ShapeConstraint.rule must say the rule in words, got {self.rule!r}")
        if not callable(self.holds):
            raise TypeError(f"ShapeConstraint {self.rule!r}: holds must be a function of ModelConfig")

    @classmethod
    def multiple_of(cls, name: str, k: int, why: str = "") -> ShapeConstraint:
        """``name % k == 0`` for one of ``SIZE_FIELDS`` (e.g. ``multiple_of("head_dim", 2, ...)``)."""
        if name not in SIZE_FIELDS:
            raise ValueError(f"multiple_of({name!r}, ...): name one of {', '.join(SIZE_FIELDS)}")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"multiple_of({name!r}, {k!r}): k must be a whole number of 1 or more")
        return cls(f"{name} % {k} == 0", _MultipleOf(name, k), why)

    def describe(self) -> str:
        """The rule and, where given, why: "head_dim % 2 == 0 (each head is split in two halves)"."""
        return self.rule + (f" ({self.why})" if self.why else "")

    def broken_by(self, config: ModelConfig) -> str | None:
        """None when ``config`` satisfies the rule, else what broke it (a rule that raises is
        reported with its exception: the plugin's predicate does not fit this config)."""
        try:
            if self.holds(config):
                return None
        except Exception as exc:  # a plugin's predicate: its error is the message
            return f"its constraint {self.rule!r} could not be evaluated: {type(exc).__name__}: {exc}"
        return f"breaks its declared constraint {self.describe()}"
