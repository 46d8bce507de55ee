"""The synthetic-task contract: what a plugin registers through ``attnbench_register_tasks``.

A task generates examples in-process, deterministically from a seed: token inputs and
targets where only the answer positions are scored (every other target is -100), so
accuracy is computed on answers alone. Its ``options`` dataclass holds the difficulty
knobs; ``coords(options)`` names the difficulty coordinates every evaluation row carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.contract.option_types import type_problem

if TYPE_CHECKING:  # torch for the checker only: a plugin registers (and a suite validates) without it
    import torch

IGNORE = -100  # target value of positions that are not scored


@dataclass(frozen=True)
class TaskBatch:
    inputs: torch.Tensor  # (N, T) int64 token ids
    targets: torch.Tensor  # (N, T) int64: next-token answers at scored positions, else -100


@dataclass(frozen=True)
class TaskEval:
    """One extra evaluation row a task computes itself (e.g. completion accuracy)."""

    name: str
    value: float | None
    unit: str = ""
    tags: dict[str, Any] = field(default_factory=dict)


def _asdict(options: Any) -> dict[str, Any]:
    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) and not isinstance(options, type) else {}


@dataclass(frozen=True)
class Task:
    """One synthetic task.

    name: unique id used in suites (``data: {source: task, task: NAME}``).
    options: frozen dataclass of difficulty knobs (validated in ``__post_init__``).
    generate: ``(options, n, seed) -> TaskBatch`` with n examples, deterministic in seed.
    vocab_size: ``(options) -> int`` tokens the model must embed.
    seq_len: ``(options) -> int`` length T of every example's inputs.
    evaluate: optional ``(model, options, device, seed) -> list[TaskEval]`` for evaluations
        beyond answer accuracy (e.g. completing occluded images and classifying them).
    coords: ``(options) -> dict`` difficulty coordinates tagged on every evaluation row.
    tokens: what a token is: ``"ids"`` (symbols with no text meaning; checkpoints keep a
        token-ids tokenizer, text "5 4099 12" <-> ids) or ``"bytes"`` (UTF-8 bytes, vocabulary 256).
    guess_accuracy: optional ``(options, TaskBatch) -> float``, the expected accuracy on those
        examples of the best guess that uses no memory of the context's pairs (the null level a
        model must clear); without it the harness measures a trivial model (see data/floors.py).
    guess_rule: that guess, in words (e.g. "uniform over the values present in the line").
    """

    name: str
    options: type
    generate: Callable[[Any, int, int], TaskBatch]
    vocab_size: Callable[[Any], int]
    seq_len: Callable[[Any], int]
    description: str = ""
    evaluate: Callable[..., list[TaskEval]] | None = None
    coords: Callable[[Any], dict[str, Any]] = _asdict
    version: str = "0"
    tokens: str = "ids"
    guess_accuracy: Callable[[Any, TaskBatch], float] | None = None
    guess_rule: str = ""
    plugin: str = field(default="", compare=False)
    distribution: str = field(default="", compare=False)
    source_files: tuple[str, ...] = field(default=(), compare=False)

    def make_options(self, raw: dict[str, Any] | None) -> Any:
        """Validate a suite's ``task_options`` mapping into the options dataclass."""
        raw = dict(raw or {})
        known = {f.name for f in dataclasses.fields(self.options)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} for task {self.name!r}; accepted: {sorted(known)}")
        try:
            return self.options(**raw)
        except (TypeError, ValueError) as exc:  # a TypeError names no option ("'<=' not supported ..."): name it
            why = (isinstance(exc, TypeError) and type_problem(self.options, raw)) or exc
            raise ValueError(f"invalid options for task {self.name!r}: {why}") from exc
