"""The `finetune` kind: tune a trained cell's checkpoint (or a fresh model) on new data,
with LoRA adapters at one rank or with every weight, and record what that bought.

Rows. ``trainable_params`` and ``total_params`` (params), then the held-out rows of
``train``'s evaluation (loss, and accuracy for tasks or bpb for text), each tagged with
``method``, ``rank``, ``target``, ``from_scratch`` and ``train_cell_key``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from attnbench.contract.variant import Variant
from attnbench.data.loading import load_corpus
from attnbench.data.spec import DataSpec
from attnbench.errors import CheckpointError, FinetuneError
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext, trained_run
from attnbench.experiments.finetune.adapters import add_lora, capped_ranks, target_names, trainable_params
from attnbench.experiments.finetune.link import peft_version
from attnbench.experiments.finetune.vocab import unseen_answer_tokens
from attnbench.experiments.train.loop import evaluate, lr_at, make_optimizer, planned_steps
from attnbench.experiments.train.state import save_final
from attnbench.experiments.train.summary import headline
from attnbench.nn.backbone import Backbone
from attnbench.nn.checkpoint import load_checkpoint, run_checkpoint
from attnbench.nn.model import LanguageModel
from attnbench.nn.precision import autocast_for, resolve
from attnbench.plan.cells import Cell
from attnbench.plan.downstream_spec import FinetuneSpec
from attnbench.store.database import Metric, Result


def _base_model(cell: Cell, variant: Variant, ctx: RunContext, train: dict[str, Any]) -> LanguageModel:
    """The checkpoint's model, or (from_scratch) a fresh one of the same config and seed."""
    if cell.spec_as(FinetuneSpec).from_scratch:
        torch.manual_seed(cell.seed)
        return Backbone(cell.model, variant.build_mixer)
    model, meta = load_checkpoint(run_checkpoint(ctx.store, train), ctx.registry)
    if meta.variant != cell.variant or meta.model_kind != "backbone":
        raise FinetuneError(
            f"checkpoint {meta.path} holds a {meta.model_kind} model of variant "
            f"{meta.variant!r}, not a backbone model of {cell.variant!r}; fine-tune the "
            "checkpoints of a train experiment with model_kind: backbone and the same variants"
        )
    return model


def _prepare(cell: Cell, model: LanguageModel) -> tuple[LanguageModel, list[str], dict[str, int]]:
    """The model made tunable, the adapted layers, and those too small for the rank (name ->
    the rank they got)."""
    spec = cell.spec_as(FinetuneSpec)
    if spec.method == "full":
        for p in model.parameters():
            p.requires_grad = True
        return model, [], {}
    if spec.rank is None:
        raise FinetuneError(f"finetune cell {cell.experiment}/{cell.variant}: method lora needs a rank")
    names = target_names(model, spec.target)
    capped = capped_ranks(model, names, spec.rank)
    return add_lora(model, names, spec.rank, spec.lora_alpha, spec.from_scratch), names, capped


def _train(
    model: torch.nn.Module, data: Any, cell: Cell, ctx: RunContext
) -> tuple[list[Metric], int, float, str | None]:
    """AdamW on the trainable weights, warmup + cosine, clipping; (curve, steps, seconds,
    why it diverged or None): a logged loss above diverge_factor x ln(vocab) stops it."""
    t, device = cell.spec_as(FinetuneSpec), ctx.device
    steps = planned_steps(cell, None)
    seconds = t.budget.seconds or math.inf  # a steps, tokens or FLOPs budget sets steps
    opt = make_optimizer(model, cell)
    gen = torch.Generator().manual_seed(cell.seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    metrics, step, spent = [], 0, 0.0
    model.train()
    while (step < steps) if steps is not None else (spent < seconds):
        started = time.perf_counter()
        lr = lr_at(step, step / steps if steps else spent / seconds, t.lr, t.warmup_steps, t.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = (v.to(device) for v in data.train_batch(t.batch_size, t.seq_len, gen))  # (B, T) each
        with autocast_for(device, resolve(device, t.precision)):  # train.precision (auto's probe is cached)
            loss = model(x, y).loss  # ()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        spent += time.perf_counter() - started
        if step % t.log_interval == 0 or step == steps:
            value = loss.item()
            metrics.append(Metric(step, step * t.batch_size * t.seq_len, spent, "train/loss", value))
            ctx.progress(step, steps or 0, value)
            if ctx.live:
                ctx.live(metrics[-1:])
            limit = t.diverge_factor * math.log(cell.model.vocab_size)
            if not math.isfinite(value) or value > limit:
                return metrics, step, spent, f"training loss {value:.4g} at step {step} (limit {limit:.3g})"
    return metrics, step, spent, None


def run_finetune_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    spec = cell.spec_as(FinetuneSpec)
    train = trained_run(ctx, cell, "tune")
    if isinstance(train, CellOutcome):
        return train
    try:
        model, names, capped = _prepare(cell, _base_model(cell, variant, ctx, train))
    except (FinetuneError, CheckpointError) as exc:
        return CellOutcome("failed", error=str(exc))
    model = model.to(ctx.device)
    n_train, n_total = trainable_params(model), sum(p.numel() for p in model.parameters())
    data = load_corpus(cell.data_spec(), ctx.registry)
    unseen = (
        []
        if spec.from_scratch
        else unseen_answer_tokens(load_corpus(DataSpec.model_validate(train["config"]["data"]), ctx.registry), data)
    )
    metrics, steps, seconds, diverged = _train(model, data, cell, ctx)
    started = time.perf_counter()
    rows = evaluate(model, data, cell, ctx.device)
    eval_time = time.perf_counter() - started
    tags = {
        "method": spec.method,
        "rank": spec.rank,
        "target": spec.target,
        "from_scratch": spec.from_scratch,
        "train_run_id": train["id"],
        "train_cell_key": train["cell_key"],
    }
    results = [
        Result("trainable_params", n_train, "params", dict(tags)),
        Result("total_params", n_total, "params", dict(tags)),
    ]
    results += [Result(r.name, r.value, r.unit, {**r.tags, **tags}) for r in rows]
    kept = None
    if spec.checkpoint and not names and ctx.checkpoint_dir is not None:  # full tuning: a plain model
        kept = save_final(ctx.checkpoint_dir, cell, model.cpu(), steps, getattr(data, "tokenizer_json", None))
    summary = {
        **{f"val_{k}": v for k, v in headline(rows).items()},
        **tags,
        "trainable_params": n_train,
        "total_params": n_total,
        "adapted_modules": names,
        # layers smaller than the rank got their full rank instead (name -> rank used)
        "lora_rank_capped": capped,
        "steps": steps,
        "train_time_s": seconds,
        "eval_time_s": eval_time,
        **resolve(ctx.device, spec.precision).record(),  # dtype, the setting, why, auto's probe
        "peft_version": peft_version() if names else None,
        "checkpoint": str(kept) if kept else None,
        "unseen_answer_tokens": unseen,
    }  # scored ids the base model barely saw (finetune/vocab.py)
    return CellOutcome("diverged" if diverged else "done", summary, metrics, results, diverged)


KIND = Kind(
    "finetune",
    run_finetune_cell,
    code=(*COMMON_CODE, "attnbench.experiments.finetune", "attnbench.experiments.train"),
    on_driver=True,
)
