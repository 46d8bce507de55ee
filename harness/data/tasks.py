"""Synthetic-task data for training: examples generated once per cell from the task's
generator (train and held-out sets from disjoint seeds), scored on answer positions. A task's
declared null level is checked here (a float in [0, 1] at every evaluation setting), so a bad
one is refused when a run plans its cells, before anything trains."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch

from attnbench.contract.task import IGNORE, Task, TaskBatch
from attnbench.data.floors import declared_level
from attnbench.data.spec import DataSpec, EvalSet
from attnbench.data.tokenizers import TokenIdsTokenizer
from attnbench.data.vocab import task_of, task_options, task_vocab
from attnbench.errors import DataError

_CACHE: dict[str, TaskData] = {}
_VAL_SEED_OFFSET = 1_000_003  # held-out examples come from a disjoint seed stream
_TEST_SEED_OFFSET = 2_000_003  # test examples: another disjoint stream, fresh under a different seed
_CHECK_EXAMPLES = 8  # held-out examples a task's declared null level is checked on at load


@dataclass(frozen=True)
class TaskData:
    task: Task
    options: Any  # the base task options
    train_inputs: torch.Tensor  # (N, T) int64
    train_targets: torch.Tensor  # (N, T) int64, IGNORE except answers
    evals: list[tuple[Any, TaskBatch]]  # (options, held-out examples) per eval setting
    vocab_size: int
    sha256: str
    description: str
    tests: tuple[tuple[Any, TaskBatch], ...] = ()  # (options, test examples) per eval setting
    bytes_per_token = None

    @property
    def tokenizer_json(self) -> str | None:
        """What checkpoints keep to read the model's tokens: a token-ids tokenizer, or None
        (the default, bytes) for a byte-level task."""
        return None if self.task.tokens == "bytes" else TokenIdsTokenizer(self.vocab_size).to_json()

    def train_batch(self, batch_size: int, seq_len: int, gen: torch.Generator):
        ix = torch.randint(len(self.train_inputs), (batch_size,), generator=gen)  # (B,)
        return self.train_inputs[ix], self.train_targets[ix]  # (B, T), (B, T)

    def eval_sets(self, batch_size: int, seq_len: int, max_tokens: int) -> list[EvalSet]:
        sets = []
        splits = [("val", e) for e in self.evals] + [("test", e) for e in self.tests]
        for split, (options, batch) in splits:
            tags = {"split": split, "task": self.task.name, **self.task.coords(options)}
            n = len(batch.inputs)
            batches = [
                (batch.inputs[i : i + batch_size], batch.targets[i : i + batch_size]) for i in range(0, n, batch_size)
            ]
            sets.append(EvalSet(tags, batches, None, scored="answers"))
        return sets


def load_task_data(spec: DataSpec, registry) -> TaskData:
    key = json.dumps(spec.model_dump(), sort_keys=True)
    if key in _CACHE:
        return _CACHE[key]
    task = task_of(spec, registry)
    base = task_options(task, spec.task_options, {})
    settings = spec.train_settings or [{}]
    per = -(-spec.train_examples // len(settings))  # ceil: equal parts of the mixture
    parts = [task.generate(task_options(task, spec.task_options, s), per, 2 * i) for i, s in enumerate(settings)]
    inputs = torch.cat([p.inputs for p in parts])[: spec.train_examples]  # (N, T)
    targets = torch.cat([p.targets for p in parts])[: spec.train_examples]  # (N, T)
    evals = []
    for j, s in enumerate(spec.eval_settings or [{}]):
        options = task_options(task, spec.task_options, s)
        evals.append((options, task.generate(options, spec.val_examples, _VAL_SEED_OFFSET + j)))
    tests = []
    for j, s in enumerate(spec.eval_settings or [{}]):
        if spec.test_examples is not None:
            options = task_options(task, spec.task_options, s)
            tests.append((options, task.generate(options, spec.test_examples, _TEST_SEED_OFFSET + j)))
    if not (targets != IGNORE).any():
        raise DataError(f"task {task.name!r} produced no scored positions")
    for options, batch in [*evals, *tests]:  # a bad declared null level is refused here, before any training
        declared_level(task, options, TaskBatch(batch.inputs[:_CHECK_EXAMPLES], batch.targets[:_CHECK_EXAMPLES]))
    h = hashlib.sha256(inputs.numpy().tobytes() + targets.numpy().tobytes())
    for _, b in [*evals, *tests]:
        h.update(b.inputs.numpy().tobytes() + b.targets.numpy().tobytes())
    vocab = task_vocab(spec, registry)
    data = TaskData(
        task,
        base,
        inputs,
        targets,
        evals,
        vocab,
        h.hexdigest(),
        f"task:{task.name} {json.dumps(spec.task_options, sort_keys=True)}",
        tuple(tests),
    )
    _CACHE[key] = data
    return data
