"""Training one `train` cell: AdamW, linear warmup + cosine decay, gradient clipping,
periodic held-out evaluation, fp32 on CPU and bf16 autocast on CUDA, deterministic under
the cell's seed, resumable from its last training state, stopped and recorded when it
diverges. Budgets: steps, tokens, wall-clock seconds or training FLOPs.

Under torchrun the same loop trains data-parallel (see ``harness.distributed``): the
suite's batch_size is the global batch, each rank trains on its shard of it, and rank 0
alone evaluates, checkpoints and reports; budgets count global tokens."""

from __future__ import annotations

import collections
import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from . import distributed
from .backbone import Backbone
from .cells import Cell
from .errors import TrainingError
from .experiment import CellOutcome, Progress, RunContext
from .facts import model_facts
from .model import LanguageModel
from .store import Metric, Result
from .variant import Variant


def build_model(variant: Variant, cell: Cell) -> LanguageModel:
    if cell.spec.model_kind == "own":
        return variant.build_model(cell.model)
    return Backbone(cell.model, variant.build_mixer)


def planned_steps(cell: Cell, train_flops_per_token: float | None) -> int | None:
    """Optimizer steps the budget allows; None for a wall-clock budget."""
    budget, per_step = cell.spec.budget, cell.spec.batch_size * cell.spec.seq_len
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
def evaluate(model: LanguageModel, data: Any, cell: Cell, device: torch.device) -> list[Result]:
    """Held-out rows per evaluation set: loss (nats/token), and bits per byte with
    perplexity for text, or accuracy on answer positions for tasks."""
    was_training = model.training
    model.eval()
    rows: list[Result] = []
    t = cell.spec
    for es in data.eval_sets(t.batch_size, t.seq_len, t.eval_tokens):
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
        rows.append(Result("loss", loss, "nats/token", dict(es.tags)))
        if es.scored == "answers":
            rows.append(Result("accuracy", correct / max(1, count), "", dict(es.tags)))
        else:
            rows.append(Result("bpb", loss / math.log(2) / es.bytes_per_token, "bits/byte", dict(es.tags)))
            rows.append(Result("ppl", math.exp(min(loss, 50.0)), "", dict(es.tags)))
    task = getattr(data, "task", None)
    if task is not None and task.evaluate is not None:
        for e in task.evaluate(model, data.options, device, cell.seed):
            rows.append(Result(e.name, e.value, e.unit,
                               {"split": "val", "task": task.name, **task.coords(data.options), **e.tags}))
    model.train(was_training)
    return rows


def _headline(rows: list[Result]) -> dict[str, float]:
    """Summary values: each metric averaged over the evaluation sets that report it."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.value is not None:
            out.setdefault(r.name, []).append(r.value)
    return {k: sum(v) / len(v) for k, v in out.items()}


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomic write: a crash leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _final_payload(model: LanguageModel, cell: Cell, step: int) -> dict[str, Any]:
    return {"model": model.state_dict(), "config": cell.model.to_dict(), "variant": cell.variant,
            "model_kind": cell.spec.model_kind, "cell_key": cell.key, "step": step}


def _load_state(path: Path, cell: Cell, device: torch.device) -> tuple[dict[str, Any] | None, str | None]:
    """A resumable training state, or (None, why it was unusable)."""
    if not path.is_file():
        return None, None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        if not isinstance(state, dict) or state.get("cell_key") != cell.key:
            raise ValueError("it belongs to another cell")
        return state, None
    except Exception as exc:
        return None, f"training state {path} is unreadable ({type(exc).__name__}: {exc}); restarted from step 0"


def _typical(times: collections.deque[float]) -> float:
    """Median of recent step times (0 before the first step)."""
    return statistics.median(times) if times else 0.0


def train_cell(
    cell: Cell, variant: Variant, data: Any, device: torch.device,
    progress: Progress | None = None, checkpoint_dir: Path | None = None,
) -> CellOutcome:
    t = cell.spec
    distributed.local_batch_size(t.batch_size)  # the global batch must split evenly over ranks
    main = distributed.is_main()
    torch.manual_seed(cell.seed)
    model = build_model(variant, cell).to(device)
    n_params = model.num_params()
    facts = model_facts(variant, cell.model, t.seq_len, n_params)
    if t.model_kind == "own":  # declared facts describe the shared-backbone mixer
        facts.update(state_elements=None, mixer_flops_per_token=None, fwd_flops_per_token=None,
                     train_flops_per_token=None)
    steps = planned_steps(cell, facts["train_flops_per_token"])
    seconds = t.budget.seconds
    opt = make_optimizer(model, cell)
    gen = torch.Generator().manual_seed(cell.seed)  # batch order: independent of model init
    per_step = t.batch_size * t.seq_len
    metrics: list[Metric] = []
    status, error, headline = "done", None, {}
    train_time, eval_time, step = 0.0, 0.0, 0
    state_path = checkpoint_dir / f"{cell.key}.state.pt" if checkpoint_dir and t.checkpoint_interval else None
    resumed_from, resume_error, rank_rngs = None, None, []
    if state_path is not None:
        # Rank 0 reads the training state and hands it to the other ranks (tensors via CPU).
        state, resume_error = distributed.from_main(_load_state(
            state_path, cell, device if not distributed.active() else torch.device("cpu"))
            if main else None)
        if resume_error and main:
            print(f"attnbench: warning: {resume_error}", file=sys.stderr)
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            torch.set_rng_state(state["torch_rng"].cpu())
            gen.set_state(state["gen"].cpu())
            step, train_time, eval_time = state["step"], state["train_time"], state["eval_time"]
            metrics = [Metric(*m) for m in state["metrics"]]
            headline, resumed_from = state["headline"], step
            rank_rngs = state.get("torch_rng_ranks") or []
    if distributed.active():  # each rank draws its own dropout masks, restored exactly on resume
        if len(rank_rngs) == distributed.world_size():
            torch.set_rng_state(rank_rngs[distributed.rank()].cpu())
        else:
            torch.manual_seed(cell.seed + 1_000_003 * distributed.rank() + step)
    fwd = distributed.wrap_model(model, device)  # DDP in a process group, else the model
    diverge_at = t.diverge_factor * math.log(cell.model.vocab_size)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rows: list[Result] = []
    model.train()
    recent: collections.deque[float] = collections.deque(maxlen=16)  # last step times (seconds budget)
    while (step < steps) if steps is not None else (train_time + 0.5 * _typical(recent) < seconds):
        t0 = time.perf_counter()
        progress_frac = step / steps if steps is not None else train_time / seconds
        lr = lr_at(step, progress_frac, t.lr, t.warmup_steps, t.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = distributed.shard(*data.train_batch(t.batch_size, t.seq_len, gen))  # this rank's rows
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast_for(device):
            out = fwd(x, y)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        log_now = step % t.log_interval == 0 or (steps is not None and step == steps)
        # .item() waits for the device: only on log steps, or every step of a seconds budget.
        loss = distributed.global_mean(out.loss) if (log_now or seconds is not None) else None
        step_time = time.perf_counter() - t0
        if seconds is not None:  # every rank counts the slowest rank's time: all stop together
            step_time = distributed.slowest(step_time)
        train_time += step_time
        recent.append(step_time)
        # A wall-clock budget stops where the next step would overshoot more than stopping now
        # undershoots, so every variant's training time is within half a step of the budget
        # (a typical step: the median of recent ones, so one slow step does not end the run).
        done = (steps is not None and step >= steps) or (
            seconds is not None and train_time + 0.5 * _typical(recent) >= seconds)
        if log_now or done:
            tokens = step * per_step
            metrics.append(Metric(step, tokens, train_time, "train/loss", loss))
            metrics.append(Metric(step, tokens, train_time, "train/lr", lr))
            for name, value in out.aux.items():
                aux = distributed.global_mean(value)
                metrics.append(Metric(step, tokens, train_time, f"train/aux/{name}", aux))
            if not math.isfinite(loss) or loss > diverge_at:
                status = "diverged"
                error = f"training loss {loss:.4g} at step {step} (limit {diverge_at:.3g} = {t.diverge_factor} x ln(vocab))"
                break
            if progress:
                progress(step, steps or 0, loss)
        if (step % t.eval_interval == 0 or done) and main:  # evaluated once, by rank 0
            t_eval = time.perf_counter()
            rows = evaluate(model, data, cell, device)
            eval_time += time.perf_counter() - t_eval
            headline = _headline(rows)
            for name, value in headline.items():
                metrics.append(Metric(step, step * per_step, train_time, f"val/{name}", value))
        if state_path is not None and step % t.checkpoint_interval == 0 and not done:
            rngs = distributed.all_gather(torch.get_rng_state()) if distributed.active() else None
            extra = {"torch_rng_ranks": rngs} if rngs else {}
            if main:
                save_checkpoint(state_path, {
                    "model": model.state_dict(), "optim": opt.state_dict(), "step": step,
                    "train_time": train_time, "eval_time": eval_time, "torch_rng": torch.get_rng_state(),
                    "gen": gen.get_state(), "metrics": [tuple(m.__dict__.values()) for m in metrics],
                    "headline": headline, "cell_key": cell.key, **extra,
                })
        if step % t.eval_interval == 0 or done or (state_path is not None and step % t.checkpoint_interval == 0):
            distributed.barrier()  # the other ranks wait here, outside their timed steps
    checkpoint = None
    if checkpoint_dir is not None and t.checkpoint and status == "done" and main:
        checkpoint = checkpoint_dir / f"{cell.key}.pt"
        save_checkpoint(checkpoint, _final_payload(model, cell, step))
    if state_path is not None and state_path.exists() and main:
        state_path.unlink()
    tokens = step * per_step
    tfpt = facts["train_flops_per_token"]
    summary = {
        **{f"val_{k}": v for k, v in headline.items()},
        "budget": t.budget.model_dump(exclude_none=True), "steps": step, "tokens": tokens,
        "train_flops": tfpt * tokens if tfpt else None,
        "train_time_s": train_time, "eval_time_s": eval_time,
        "tokens_per_s": tokens / train_time if train_time > 0 else None,
        "dtype": compute_dtype(device), "resumed_from_step": resumed_from, "resume_error": resume_error,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "checkpoint": str(checkpoint) if checkpoint else None, "diverged_at_step": step if status == "diverged" else None,
        "world_size": distributed.world_size(), "dist_backend": distributed.backend(),
        **facts,
    }
    return CellOutcome(status, summary, metrics, rows, error)


def run_train_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    from .data import load_corpus

    return train_cell(cell, variant, load_corpus(cell.data, ctx.registry), ctx.device,
                      ctx.progress, ctx.checkpoint_dir)
