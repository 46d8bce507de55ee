"""What a training cell is made of: the model, the optimizer, the learning-rate schedule
and the number of steps its budget allows."""

from __future__ import annotations

import math

import torch

from attnbench.contract.variant import Variant
from attnbench.errors import TrainingError
from attnbench.nn.backbone import Backbone
from attnbench.nn.model import LanguageModel, as_language_model
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell


def build_model(variant: Variant, cell: Cell) -> LanguageModel:
    if cell.spec_as(TrainSpec).model_kind == "own":
        # the suite is validated against this, and against backbone-only model settings
        # (positions, mlp) on an own model (plan/validation.py)
        if variant.build_model is None:
            raise TrainingError(f"variant {variant.name!r} has no model of its own; use model_kind: backbone")
        return as_language_model(variant.build_model(cell.model), variant.name)
    return Backbone(cell.model, variant.build_mixer)


def planned_steps(cell: Cell, train_flops_per_token: float | None) -> int | None:
    """Optimizer steps the budget allows; None for a wall-clock budget."""
    t = cell.spec_as(TrainSpec)
    budget, per_step = t.budget, t.batch_size * t.seq_len
    if budget.steps is not None:
        return budget.steps
    if budget.tokens is not None:
        return max(1, math.ceil(budget.tokens / per_step))
    if budget.flops is not None:
        if not train_flops_per_token:
            raise TrainingError(
                f"variant {cell.variant!r} declares no flops_per_token, so a FLOPs budget cannot "
                "be converted to steps; use a steps, tokens or seconds budget for it"
            )
        return max(1, math.floor(budget.flops / (train_flops_per_token * per_step)))
    return None


def lr_at(step: int, progress: float, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to lr * min_ratio as the
    budget's progress (fraction of steps, or of seconds) goes from 0 to 1."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(1.0, max(0.0, progress))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model: torch.nn.Module, cell: Cell) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on biases, norms or gains).

    The fused implementation (one kernel over all parameters) where every parameter is on a
    CPU or CUDA device: the same update as the per-tensor loop, ~3x faster on a CPU for the
    small models of the default suite (0.28 against 0.91 ms per step for a d64 x 2 model,
    one thread), where the optimizer was ~7% of a training step. ``optimizer_record`` says
    which ran."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    t = cell.spec_as(TrainSpec)
    fused = all(p.device.type in ("cpu", "cuda") for p in (*decay, *other))
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        fused=fused or None,  # None: torch's own choice (the per-tensor loop) elsewhere
    )


def optimizer_record(opt: torch.optim.Optimizer) -> dict[str, str]:
    """What ran, for a cell's summary: the optimizer class and its implementation."""
    impl = "fused" if opt.defaults.get("fused") else "foreach" if opt.defaults.get("foreach") else "per-tensor"
    return {"optimizer": type(opt).__name__, "optimizer_impl": impl}
