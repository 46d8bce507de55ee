"""Training one `train` cell: AdamW, linear warmup + cosine decay, gradient clipping,
periodic held-out evaluation (loss, bits per byte, perplexity), fp32 on CPU and bf16
autocast on CUDA, deterministic under the cell's seed."""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path

import torch

from .backbone import Backbone
from .cells import Cell
from .data import Corpus, eval_batches, sample_batch
from .facts import model_facts
from .model import LanguageModel
from .experiment import CellOutcome, Progress, RunContext
from .store import Metric, Result
from .variant import Variant


def build_model(variant: Variant, cell: Cell) -> LanguageModel:
    if cell.spec.model_kind == "own":
        return variant.build_model(cell.model)
    return Backbone(cell.model, variant.build_mixer)


def total_steps(cell: Cell) -> int:
    budget, per_step = cell.spec.budget, cell.spec.batch_size * cell.spec.seq_len
    if budget.steps is not None:
        return budget.steps
    return max(1, math.ceil(budget.tokens / per_step))


def lr_at(step: int, steps: int, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warmup for `warmup` steps, then cosine decay to lr * min_ratio at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def make_optimizer(model: torch.nn.Module, cell: Cell) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on biases, norms or gains)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    t = cell.spec
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=t.lr, betas=(t.beta1, t.beta2),
    )


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; nothing on CPU (fp32: bf16 matmul is very slow on AVX2 CPUs)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compute_dtype(device: torch.device) -> str:
    return "bf16-autocast" if device.type == "cuda" else "fp32"


@torch.no_grad()
def evaluate(model: LanguageModel, corpus: Corpus, cell: Cell, device: torch.device) -> dict[str, float]:
    """Held-out mean cross-entropy (nats/token), bits per byte and perplexity."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for x, y in eval_batches(corpus.val, cell.spec.batch_size, cell.spec.seq_len, cell.spec.eval_tokens):
        with autocast_for(device):
            out = model(x.to(device), y.to(device))
        total += out.ce.item() * y.numel()  # sum of nats, accumulated in fp64 on the host
        count += y.numel()
    model.train(was_training)
    loss = total / count
    return {"loss": loss, "bpb": loss / math.log(2) / corpus.bytes_per_token, "ppl": math.exp(min(loss, 50.0))}


def save_checkpoint(path: Path, model: LanguageModel, cell: Cell, step: int) -> None:
    """Atomic write: a crash leaves the old checkpoint or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "config": cell.model.to_dict(), "variant": cell.variant,
                "model_kind": cell.spec.model_kind, "cell_key": cell.key, "step": step}, tmp)
    os.replace(tmp, path)


def train_cell(
    cell: Cell, variant: Variant, corpus: Corpus, device: torch.device,
    progress: Progress | None = None, checkpoint_dir: Path | None = None,
) -> CellOutcome:
    torch.manual_seed(cell.seed)
    model = build_model(variant, cell).to(device)
    n_params = model.num_params()
    opt = make_optimizer(model, cell)
    gen = torch.Generator().manual_seed(cell.seed)  # batch order: independent of model init
    steps, t = total_steps(cell), cell.spec
    per_step = t.batch_size * t.seq_len
    metrics: list[Metric] = []
    status, error, val = "done", None, {}
    train_time, eval_time, step = 0.0, 0.0, 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model.train()
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        lr = lr_at(step - 1, steps, t.lr, t.warmup_steps, t.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = sample_batch(corpus.train, t.batch_size, t.seq_len, gen)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast_for(device):
            out = model(x, y)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        logging = step % t.log_interval == 0 or step == steps
        if logging:
            loss = out.loss.item()  # host sync only every log_interval steps
            train_time += time.perf_counter() - t0
            tokens = step * per_step
            metrics.append(Metric(step, tokens, train_time, "train/loss", loss))
            metrics.append(Metric(step, tokens, train_time, "train/lr", lr))
            for name, value in out.aux.items():
                metrics.append(Metric(step, tokens, train_time, f"train/aux/{name}", value.item()))
            if not math.isfinite(loss):
                status, error = "diverged", f"loss became {loss} at step {step}"
                break
            if progress:
                progress(step, steps, loss)
        else:
            train_time += time.perf_counter() - t0
        if step % t.eval_interval == 0 or step == steps:
            t_eval = time.perf_counter()
            val = evaluate(model, corpus, cell, device)
            eval_time += time.perf_counter() - t_eval
            for name, value in val.items():
                metrics.append(Metric(step, step * per_step, train_time, f"val/{name}", value))
    if checkpoint_dir is not None and t.checkpoint and status == "done":
        save_checkpoint(checkpoint_dir / f"{cell.key}.pt", model, cell, step)
    tokens = step * per_step
    summary = {
        **{f"val_{k}": v for k, v in val.items()},
        "steps": step, "tokens": tokens, "train_time_s": train_time, "eval_time_s": eval_time,
        "tokens_per_s": tokens / train_time if train_time > 0 else None,
        "dtype": compute_dtype(device),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "checkpoint": str(checkpoint_dir / f"{cell.key}.pt") if checkpoint_dir and t.checkpoint and status == "done" else None,
        **model_facts(variant, cell.model, t.seq_len, n_params),
    }
    if cell.spec.model_kind == "own":  # declared facts describe the shared-backbone mixer
        summary.update(state_elements=None, mixer_flops_per_token=None, fwd_flops_per_token=None,
                       train_flops_per_token=None)
    results = [Result(name, value, "nats" if name == "loss" else "", {"split": "val"}) for name, value in val.items()]
    return CellOutcome(status, summary, metrics, results, error)


def run_train_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    from .data import load_corpus

    return train_cell(cell, variant, load_corpus(cell.data), ctx.device, ctx.progress, ctx.checkpoint_dir)
