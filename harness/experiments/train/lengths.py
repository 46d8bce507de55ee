"""Length extrapolation: a trained model evaluated at each of ``train.eval_lengths``.

Text: the held-out loss per position bucket (buckets of T/4 positions, T the trained length)
and over the whole window, at each length. Tasks: per evaluation setting, the task regenerated
with ``seq_len`` set to the length (same held-out seed stream as the validation set), scored
as accuracy per answer token and as exact match per example (every answer token right under
teacher forcing). A length the model cannot run (``LanguageModel.length_limit``) is recorded
as "cannot extend: <reason>", never run and never skipped in silence.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from attnbench.contract.task import IGNORE
from attnbench.errors import DataError
from attnbench.nn.model import LanguageModel
from attnbench.nn.precision import autocast_for
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.records import Result

VAL_SEED_OFFSET = 1_000_003  # the validation set's seed stream (attnbench.data.tasks)
Batches = list[tuple[torch.Tensor, torch.Tensor]]


class LengthSkipped(Exception):
    """A length that is recorded with its reason instead of evaluated."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _train_spec(cell: Cell) -> TrainSpec:
    if not isinstance(cell.spec, TrainSpec):
        raise TypeError(
            f"eval_lengths runs in train-like cells, and {cell.key or cell.experiment} is a {cell.kind} cell"
        )
    return cell.spec


def _status_row(length: int, status: str, reason: str = "") -> Result:
    tags = {"split": "val", "eval_length": length, "status": status, "reason": reason}
    return Result("length_status", None, "", tags)


def _logits(model: LanguageModel, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    with autocast_for(device):
        return model(x.to(device)).logits.float()  # (B, L, V) fp32 for the log-softmax


def _text_rows(model: LanguageModel, data: Any, cell: Cell, length: int, device: torch.device) -> list[Result]:
    t = _train_spec(cell)
    (val,) = [es for es in data.eval_sets(t.batch_size, length, t.eval_tokens) if es.tags.get("split") == "val"]
    nats = torch.zeros(length, dtype=torch.float64)  # (L,) summed loss per position
    windows = 0
    for x, y in val.batches:
        logits = _logits(model, x, device)  # (B, L, V)
        ce = F.cross_entropy(logits.transpose(1, 2), y.to(device), reduction="none")  # (B, L)
        nats += ce.sum(0).double().cpu()
        windows += x.size(0)
    per_pos = nats / windows  # (L,) mean loss at each position
    tags = {"split": "val", "eval_length": length, "windows": windows}
    rows = [Result("length_loss", float(per_pos.mean()), "nats/token", dict(tags))]
    width = max(1, t.seq_len // 4)
    for start in range(0, length, width):
        end = min(length, start + width)
        bucket = {**tags, "pos_start": start, "pos_end": end}
        rows.append(Result("position_loss", float(per_pos[start:end].mean()), "nats/token", bucket))
    return rows


def _scored(model: LanguageModel, inputs: torch.Tensor, targets: torch.Tensor, cell: Cell, device) -> tuple:
    """(answer tokens right, answer tokens, examples with every answer token right, examples)."""
    right = total = exact = 0
    bs = _train_spec(cell).batch_size
    for i in range(0, len(inputs), bs):
        x, y = inputs[i : i + bs], targets[i : i + bs].to(device)  # (B, L), (B, L)
        scored = y != IGNORE  # (B, L)
        hit = (_logits(model, x, device).argmax(-1) == y) & scored  # (B, L)
        right += int(hit.sum())
        total += int(scored.sum())
        exact += int((hit.sum(1) == scored.sum(1)).sum())  # examples with no answer token wrong
    return right, total, exact, len(inputs)


def _task_rows(model: LanguageModel, data: Any, cell: Cell, length: int, device: torch.device) -> list[Result]:
    task, spec = data.task, cell.data
    if spec is None:
        raise LengthSkipped("cannot evaluate", "the cell has no data specification")
    has_seq_len = "seq_len" in {f.name for f in dataclasses.fields(task.options)}
    if length != _train_spec(cell).seq_len and not has_seq_len:
        raise LengthSkipped("cannot evaluate", f"task {task.name!r} has no seq_len option to set")
    rows = []
    for j, setting in enumerate(spec.eval_settings or [{}]):
        raw = {**spec.task_options, **setting, **({"seq_len": length} if has_seq_len else {})}
        try:
            options = task.make_options(raw)
        except ValueError as exc:
            raise LengthSkipped("cannot evaluate", str(exc)) from None
        batch = task.generate(options, spec.val_examples, VAL_SEED_OFFSET + j)
        right, total, exact, n = _scored(model, batch.inputs, batch.targets, cell, device)
        tags = {"split": "val", "task": task.name, **task.coords(options), "eval_length": length}
        rows.append(Result("length_accuracy", right / max(1, total), "", {**tags, "n": total}))
        rows.append(Result("length_exact", exact / max(1, n), "", {**tags, "n": n}))
    return rows


@torch.no_grad()
def evaluate_lengths(
    model: LanguageModel, data: Any, cell: Cell, device: torch.device
) -> tuple[list[Result], dict[str, str]]:
    """Rows of every length in ``cell.spec.eval_lengths`` and a summary: length -> "ok" or why not."""
    lengths = sorted(_train_spec(cell).eval_lengths or [])
    was_training = model.training
    model.eval()
    limit = model.length_limit()
    rows: list[Result] = []
    summary: dict[str, str] = {}
    for length in lengths:
        try:
            if limit is not None and length > limit[0]:
                raise LengthSkipped("cannot extend", limit[1])
            measure = _task_rows if getattr(data, "task", None) is not None else _text_rows
            rows.extend(measure(model, data, cell, length, device))
            status, reason = "ok", ""
        except LengthSkipped as skip:
            status, reason = skip.status, skip.reason
        except DataError as exc:  # e.g. a held-out split shorter than the length
            status, reason = "cannot evaluate", str(exc)
        except (RuntimeError, ValueError) as exc:  # a mixer that fails at a length it did not declare
            status, reason = "failed", f"{type(exc).__name__}: {exc}"
        rows.append(_status_row(length, status, reason))
        summary[str(length)] = status if status == "ok" else f"{status}: {reason}"
    model.train(was_training)
    return rows, summary


def with_length_rows(
    model: LanguageModel, data: Any, cell: Cell, device: torch.device, rows: list[Result], summary: dict
) -> list[Result]:
    """The rows with those of ``train.eval_lengths`` added (after training), the lengths' status in the summary."""
    if not getattr(cell.spec, "eval_lengths", None):
        return rows
    length_rows, summary["eval_lengths"] = evaluate_lengths(model, data, cell, device)
    return [*rows, *length_rows]
