"""Held-out evaluation of a model under training."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from attnbench.data.floors import targets_fingerprint
from attnbench.nn.model import LanguageModel
from attnbench.nn.precision import autocast_for
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.database import Result


@torch.no_grad()
def evaluate(
    model: LanguageModel, data: Any, cell: Cell, device: torch.device, splits: tuple[str, ...] = ("val",)
) -> list[Result]:
    """Held-out rows per evaluation set of ``splits``: loss (nats/token), and bits per byte
    with perplexity for text, or accuracy on answer positions for tasks."""
    was_training = model.training
    model.eval()
    rows: list[Result] = []
    t = cell.spec_as(TrainSpec)
    for es in data.eval_sets(t.batch_size, t.seq_len, t.eval_tokens):
        if es.tags.get("split", "val") not in splits:
            continue
        nats, count, correct = 0.0, 0, 0
        for x, y in es.batches:
            x, y = x.to(device), y.to(device)
            with autocast_for(device):
                logits = model(x).logits  # (B, T, V)
            flat = logits.float().reshape(-1, logits.size(-1))  # (B*T, V) fp32 log-softmax
            nats += F.cross_entropy(flat, y.reshape(-1), ignore_index=-100, reduction="sum").item()
            scored = y != -100  # (B, T)
            count += int(scored.sum())
            correct += int((logits.argmax(-1) == y)[scored].sum())
        loss = nats / max(1, count)
        tags = dict(es.tags) if es.scored == "answers" else {**es.tags, "targets": targets_fingerprint(es.batches)}
        rows.append(Result("loss", loss, "nats/token", tags))
        if es.scored == "answers":
            rows.append(Result("accuracy", correct / max(1, count), "", dict(es.tags)))
            rows.append(Result("answers", float(count), "count", dict(es.tags)))  # n behind the accuracy
        else:
            rows.append(Result("bpb", loss / math.log(2) / es.bytes_per_token, "bits/byte", dict(tags)))
            rows.append(Result("ppl", math.exp(min(loss, 50.0)), "", dict(tags)))
    task = getattr(data, "task", None)
    if task is not None and task.evaluate is not None:
        for e in task.evaluate(model, data.options, device, cell.seed):
            rows.append(
                Result(
                    e.name, e.value, e.unit, {"split": "val", "task": task.name, **task.coords(data.options), **e.tags}
                )
            )
    model.train(was_training)
    return rows


def headline(rows: list[Result], split: str = "val") -> dict[str, float]:
    """Summary values of one split: each metric averaged over the evaluation sets that report it."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.value is not None and r.tags.get("split", "val") == split:
            out.setdefault(r.name, []).append(r.value)
    return {k: sum(v) / len(v) for k, v in out.items()}
