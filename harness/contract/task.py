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
from attnbench.contract.reference import Reference
from attnbench.errors import PluginError

if TYPE_CHECKING:  # torch for the checker only: a plugin registers (and a suite validates) without it
    import torch

IGNORE = -100  # target value of positions that are not scored
# The binding-free predictors whose best accuracy is a task's null level (fitted and scored by
# attnbench.data.nulls, which says what each one does).
NULL_PREDICTORS = (
    "position_majority",
    "answer_frequency",
    "copy_by_rank",
    "copy_by_rank_and_position",
    "copy_by_offset",
    "copy_by_layout",
)


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
    generate: ``(options, n, seed) -> TaskBatch`` with n examples, deterministic in seed; or a
        ``"package.module:object"`` string naming it, imported on first use (so the registration
        module needs no torch); ``evaluate`` and ``guess_accuracy`` likewise.
    vocab_size: ``(options) -> int`` tokens the model must embed.
    seq_len: ``(options) -> int`` length T of every example's inputs.
    evaluate: optional ``(model, options, device, seed) -> list[TaskEval]`` for evaluations
        beyond answer accuracy (e.g. completing occluded images and classifying them).
    coords: ``(options) -> dict`` difficulty coordinates tagged on every evaluation row.
    tokens: what a token is: ``"ids"`` (symbols with no text meaning; checkpoints keep a
        token-ids tokenizer, text "5 4099 12" <-> ids) or ``"bytes"`` (UTF-8 bytes, vocabulary 256).
    guess_accuracy: optional ``(options, TaskBatch) -> float``, the expected accuracy on those
        examples of a guess without the capability under test (e.g. uniform over the values
        shown): a float in [0, 1], checked when the task's data is built. It is one candidate of
        the null level, which is the best of it and the measured ``null_predictors``.
    guess_rule: that guess, in words (e.g. "uniform over the values present in the line").
    null_predictors: the binding-free predictors (``NULL_PREDICTORS``, data/nulls.py) whose best
        accuracy, measured on the task's own data, is its null level; None (the default): all
        of them. Leave out a predictor that *is* the capability under test (positional copying,
        for a task that tests copying).
    """

    name: str
    options: type
    # Reference() without a default is a required field (its class access raises AttributeError);
    # the checker takes any descriptor for a default, hence the two ignores.
    generate: Reference[Callable[[Any, int, int], TaskBatch]] = Reference()
    vocab_size: Callable[[Any], int]  # pyright: ignore[reportGeneralTypeIssues]
    seq_len: Callable[[Any], int]  # pyright: ignore[reportGeneralTypeIssues]
    description: str = ""
    evaluate: Reference[Callable[..., list[TaskEval]] | None] = Reference(default=None)
    coords: Callable[[Any], dict[str, Any]] = _asdict
    version: str = "0"
    tokens: str = "ids"
    guess_accuracy: Reference[Callable[[Any, TaskBatch], float] | None] = Reference(default=None)
    guess_rule: str = ""
    null_predictors: tuple[str, ...] | None = None
    plugin: str = field(default="", compare=False)
    distribution: str = field(default="", compare=False)
    source_files: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.guess_accuracy is not None and not callable(self.guess_accuracy):
            raise PluginError(
                f"task {self.name!r}: guess_accuracy must be a function (options, batch) -> float in [0, 1] "
                f"or None, got {self.guess_accuracy!r}"
            )
        if self.null_predictors is None:
            return
        names = self.null_predictors
        if isinstance(names, str) or not isinstance(names, (tuple, list)):
            raise PluginError(
                f"task {self.name!r}: null_predictors must be a tuple of names from {list(NULL_PREDICTORS)} "
                f"or None (all), got {names!r}"
            )
        unknown = [n for n in names if n not in NULL_PREDICTORS]
        if unknown:
            raise PluginError(
                f"task {self.name!r}: unknown null predictor(s) {unknown}; known: {list(NULL_PREDICTORS)}"
            )
        if not names and self.guess_accuracy is None:
            raise PluginError(
                f"task {self.name!r}: null_predictors=() leaves no null level; name at least one of "
                f"{list(NULL_PREDICTORS)} or declare guess_accuracy"
            )
        object.__setattr__(self, "null_predictors", tuple(dict.fromkeys(names)))

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
