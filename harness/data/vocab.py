"""What a data spec asks of the model, known without loading (or generating) any data: the
vocabulary it must embed and, for a synthetic task, the length of its examples. No torch: a
suite's cells are sized while it is validated."""

from __future__ import annotations

from typing import Any

from attnbench.contract.task import Task
from attnbench.data.spec import BYTE_VOCAB, DataSpec
from attnbench.errors import DataError


def vocab_size_for(spec: DataSpec, registry=None) -> int:
    """Vocabulary the model must embed, known without loading text (except pretrained)."""
    if spec.source == "task":
        return task_vocab(spec, registry)
    if spec.tokenizer == "bpe":
        return spec.bpe_vocab_size
    if spec.tokenizer == "pretrained":
        from attnbench.data.tokenizers import pretrained, pretrained_name

        return pretrained(pretrained_name(spec)).vocab_size
    return BYTE_VOCAB


def task_of(spec: DataSpec, registry) -> Task:
    if registry is None:
        from attnbench.registry.loader import load_registry

        registry = load_registry()
    if spec.task is None:
        raise DataError("data source 'task' needs 'task' (a registered task name; see `attnbench list`)")
    return registry.get_task(spec.task)


def task_options(task: Task, base: dict[str, Any], override: dict[str, Any]) -> Any:
    try:
        return task.make_options({**base, **override})
    except ValueError as exc:
        raise DataError(str(exc)) from None


def task_vocab(spec: DataSpec, registry) -> int:
    task = task_of(spec, registry)
    settings = spec.train_settings or [{}]
    return max(task.vocab_size(task_options(task, spec.task_options, s)) for s in [*settings, *spec.eval_settings])


def task_seq_len(spec: DataSpec, registry) -> int:
    task = task_of(spec, registry)
    lengths = {
        task.seq_len(task_options(task, spec.task_options, s))
        for s in [*(spec.train_settings or [{}]), *spec.eval_settings]
    }
    if len(lengths) != 1:
        raise DataError(f"task {spec.task!r}: all train/eval settings must share one seq_len, got {sorted(lengths)}")
    return lengths.pop()
