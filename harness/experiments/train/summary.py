"""What a trained cell's summary records beside its held-out values: the budget spent,
throughput and MFU, the precision and compile settings that ran, resume and checkpoint, the model's
facts, the batches drawn and the machine's load around the training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attnbench import distributed
from attnbench.experiments.machine import machine_load, under_load
from attnbench.experiments.train.state import TrainProgress
from attnbench.nn.peak import mfu
from attnbench.nn.precision import Precision
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.database import Result


def headline(rows: list[Result], split: str = "val") -> dict[str, float]:
    """Summary values of one split: each metric averaged over the evaluation sets that report it."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.value is not None and r.tags.get("split", "val") == split:
            out.setdefault(r.name, []).append(r.value)
    return {k: sum(v) / len(v) for k, v in out.items()}


def summary(
    p: TrainProgress,
    cell: Cell,
    facts: dict[str, Any],
    device: torch.device,
    status: str,
    checkpoint: Path | None,
    compile_info: dict[str, Any],
    precision: Precision,
) -> dict[str, Any]:
    t = cell.spec_as(TrainSpec)
    tokens = p.step * t.batch_size * t.seq_len
    tfpt = facts["train_flops_per_token"]
    tokens_per_s = tokens / p.train_time if p.train_time > 0 else None
    return {
        **{f"val_{k}": v for k, v in p.headline.items()},
        "budget": t.budget.model_dump(exclude_none=True),
        "steps": p.step,
        "tokens": tokens,
        "train_flops": tfpt * tokens if tfpt else None,
        "train_time_s": p.train_time,
        "eval_time_s": p.eval_time,
        "tokens_per_s": tokens_per_s,
        **mfu(tfpt, tokens_per_s, device, "bf16" if precision.dtype == "bf16-autocast" else "fp32"),
        **precision.record(),  # dtype, the setting, why, and auto's probe figures
        "resumed_from_step": p.resumed_from,
        "resume_error": p.resume_error,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "checkpoint": str(checkpoint) if checkpoint else None,
        "diverged_at_step": p.step if status == "diverged" else None,
        "world_size": distributed.world_size(),
        "dist_backend": distributed.backend(),
        **facts,
        **compile_info,
    }


def measured(p: TrainProgress, rows: list[Result], stream: Any, load_before: dict[str, Any]) -> dict[str, Any]:
    """Test-split values, the answers scored per split (the n behind an accuracy's exact test; none
    for text), the batches drawn, and the machine's load around the training."""
    load_after = machine_load()
    answers = {
        split: [r.value for r in rows if r.name == "answers" and r.tags.get("split") == split and r.value is not None]
        for split in ("val", "test")
    }
    return {
        **{f"test_{k}": v for k, v in headline(rows, "test").items()},
        **{f"{split}_answers_total": float(sum(counts)) for split, counts in answers.items() if counts},
        "batch_stream": stream.record(p.resumed_from),
        "load_before": load_before,
        "load_after": load_after,
        "throughput_under_load": under_load(load_before, load_after),
    }
