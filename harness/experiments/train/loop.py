"""Training one `train` cell: AdamW, linear warmup + cosine decay, gradient clipping,
periodic held-out evaluation, fp32 on CPU and bf16 autocast on CUDA, deterministic under
the cell's seed, resumable from its last training state, stopped and recorded when it
diverges. Budgets: steps, tokens, wall-clock seconds or training FLOPs.

Under torchrun the same loop trains data-parallel (see ``attnbench.distributed``): the
suite's batch_size is the global batch, each rank trains on its shard of it, and rank 0
alone evaluates, checkpoints and reports; budgets count global tokens."""

from __future__ import annotations

import collections
import hashlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnbench import distributed
from attnbench.contract.variant import Variant
from attnbench.experiments.base import CellOutcome, Progress
from attnbench.experiments.machine import machine_load, under_load
from attnbench.experiments.train import state as train_state
from attnbench.experiments.train.evaluate import evaluate, headline
from attnbench.experiments.train.lengths import evaluate_lengths
from attnbench.experiments.train.setup import build_model, lr_at, make_optimizer, optimizer_record, planned_steps
from attnbench.nn.compile import maybe_compile
from attnbench.nn.flops import model_facts
from attnbench.nn.peak import mfu
from attnbench.nn.precision import Precision, autocast_for, resolve
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.database import Metric, Result


@dataclass
class _Budget:
    """When to stop: after ``steps``, or when ``seconds`` of training time are spent."""

    steps: int | None
    seconds: float | None
    recent: collections.deque  # last step times (seconds)

    def typical_step(self) -> float:
        return statistics.median(self.recent) if self.recent else 0.0

    def done(self, step: int, train_time: float) -> bool:
        # A wall-clock budget stops where the next step would overshoot more than stopping
        # now undershoots (a typical step: the median of recent ones, so one slow step does
        # not end the run), so every variant's training time is within half a step of it.
        if self.steps is not None:
            return step >= self.steps
        return train_time + 0.5 * self.typical_step() >= self._seconds()

    def fraction(self, step: int, train_time: float) -> float:
        return step / self.steps if self.steps is not None else train_time / self._seconds()

    def _seconds(self) -> float:
        if self.seconds is None:  # planned_steps gives steps for every budget but a seconds one
            raise TypeError("a training budget needs steps or seconds")
        return self.seconds


class BatchStream:
    """The training batches a cell draws, fingerprinted. Batch order comes from a generator
    seeded by the cell's seed alone, so cells of different variants with the same seed draw
    the same batches in the same order: the pairing the comparison against the baseline uses."""

    def __init__(self, data: Any) -> None:
        self.data, self.sha256, self.batches = data, hashlib.sha256(), 0

    def train_batch(self, batch_size: int, seq_len: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data.train_batch(batch_size, seq_len, gen)  # (B, T), (B, T)
        self.sha256.update(x.numpy().tobytes() + y.numpy().tobytes())
        self.batches += 1
        return x, y

    def record(self, resumed_from: int | None) -> dict[str, Any]:
        return {"sha256": self.sha256.hexdigest(), "batches": self.batches, "from_step": resumed_from or 0}


def _facts(variant: Variant, cell: Cell, n_params: int) -> dict[str, Any]:
    t = cell.spec_as(TrainSpec)
    facts = model_facts(variant, cell.model, t.seq_len, n_params)
    if t.model_kind == "own":  # declared facts describe the shared-backbone mixer
        facts.update(
            state_elements=None, mixer_flops_per_token=None, fwd_flops_per_token=None, train_flops_per_token=None
        )
    return facts


def _seed_ranks(cell: Cell, rank_rngs: list[torch.Tensor], step: int) -> None:
    """Each rank draws its own dropout masks, restored exactly on resume."""
    if not distributed.active():
        return
    if len(rank_rngs) == distributed.world_size():
        torch.set_rng_state(rank_rngs[distributed.rank()].cpu())
    else:
        torch.manual_seed(cell.seed + 1_000_003 * distributed.rank() + step)


def _train_step(
    fwd: Any,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    data: Any,
    cell: Cell,
    gen: torch.Generator,
    device: torch.device,
    lr: float,
    precision: Precision,
) -> Any:
    t = cell.spec_as(TrainSpec)
    for group in opt.param_groups:
        group["lr"] = lr
    x, y = distributed.shard(*data.train_batch(t.batch_size, t.seq_len, gen))  # this rank's rows (B, T)
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with autocast_for(device, precision):  # resolved once per cell, before the timed steps
        out = fwd(x, y)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out


def _log(p: train_state.TrainProgress, cell: Cell, out: Any, loss: float, lr: float) -> str | None:
    """Curve points of a log step; the divergence message when the loss ran away."""
    t = cell.spec_as(TrainSpec)
    tokens = p.step * t.batch_size * t.seq_len
    p.metrics.append(Metric(p.step, tokens, p.train_time, "train/loss", loss))
    p.metrics.append(Metric(p.step, tokens, p.train_time, "train/lr", lr))
    for name, value in out.aux.items():
        p.metrics.append(Metric(p.step, tokens, p.train_time, f"train/aux/{name}", distributed.global_mean(value)))
    limit = t.diverge_factor * math.log(cell.model.vocab_size)
    if not math.isfinite(loss) or loss > limit:
        return f"training loss {loss:.4g} at step {p.step} (limit {limit:.3g} = {t.diverge_factor} x ln(vocab))"
    return None


def _evaluate(
    p: train_state.TrainProgress, model: Any, data: Any, cell: Cell, device: torch.device, final: bool
) -> list[Result]:
    started = time.perf_counter()
    rows = evaluate(model, data, cell, device, ("val", "test") if final else ("val",))  # test: at the end only
    p.eval_time += time.perf_counter() - started
    p.headline = headline(rows)
    t = cell.spec_as(TrainSpec)
    tokens = p.step * t.batch_size * t.seq_len
    p.metrics.extend(Metric(p.step, tokens, p.train_time, f"val/{k}", v) for k, v in p.headline.items())
    return rows


def _summary(
    p: train_state.TrainProgress,
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


def _measured(
    p: train_state.TrainProgress, rows: list[Result], stream: BatchStream, load_before: dict[str, Any]
) -> dict[str, Any]:
    """Test-split values, the batches drawn, and the machine's load around the training."""
    load_after = machine_load()
    return {
        **{f"test_{k}": v for k, v in headline(rows, "test").items()},
        **_answers_total(rows),
        "batch_stream": stream.record(p.resumed_from),
        "load_before": load_before,
        "load_after": load_after,
        "throughput_under_load": under_load(load_before, load_after),
    }


def _answers_total(rows: list[Result]) -> dict[str, float]:
    """``val_answers_total`` and ``test_answers_total``: the answers scored over all sets of a split
    (the n behind its accuracy's per-seed exact test: tuning reads val, decisions test); none for text."""
    out = {}
    for split in ("val", "test"):
        counts = [r.value for r in rows if r.name == "answers" and r.tags.get("split") == split and r.value is not None]
        if counts:
            out[f"{split}_answers_total"] = float(sum(counts))
    return out


def _timed_step(
    p: train_state.TrainProgress,
    budget: _Budget,
    fwd: Any,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    stream: Any,
    cell: Cell,
    gen: torch.Generator,
    device: torch.device,
    precision: Precision,
) -> tuple[Any, float | None, float, bool]:
    """One optimizer step, its time added to the progress: (output, loss when read, lr, log step)."""
    t = cell.spec_as(TrainSpec)
    started = time.perf_counter()
    lr = lr_at(p.step, budget.fraction(p.step, p.train_time), t.lr, t.warmup_steps, t.min_lr_ratio)
    out = _train_step(fwd, model, opt, stream, cell, gen, device, lr, precision)
    p.step += 1
    log_now = p.step % t.log_interval == 0 or p.step == budget.steps
    # .item() waits for the device: only on log steps, or every step of a seconds budget.
    loss = distributed.global_mean(out.loss) if (log_now or budget.seconds is not None) else None
    step_time = time.perf_counter() - started
    if budget.seconds is not None:  # every rank counts the slowest rank's time: all stop together
        step_time = distributed.slowest(step_time)
    p.train_time += step_time
    budget.recent.append(step_time)
    return out, loss, lr, log_now


def _lengths(model: Any, data: Any, cell: Cell, device: torch.device, rows: list[Result], summary: dict) -> list:
    """The rows with those of ``train.eval_lengths`` added (after training), the lengths' status in the summary."""
    if not getattr(cell.spec, "eval_lengths", None):
        return rows
    length_rows, summary["eval_lengths"] = evaluate_lengths(model, data, cell, device)
    return [*rows, *length_rows]


def _finish_files(
    cell: Cell, model: Any, data: Any, step: int, checkpoint_dir: Path | None, path: Path | None, done: bool
) -> Any:
    """Rank 0, after training: the final checkpoint of a finished cell (when the cell keeps one),
    returned; the resume file removed."""
    try:
        if checkpoint_dir is not None and cell.spec_as(TrainSpec).checkpoint and done:
            return train_state.save_final(checkpoint_dir, cell, model, step, getattr(data, "tokenizer_json", None))
        return None
    finally:  # also when saving failed: the cell is stored as trained, so nothing resumes from it
        if path is not None:
            path.unlink(missing_ok=True)  # another driver that ran this cell may have removed it first


def _probe_step(model: torch.nn.Module, cell: Cell, device: torch.device) -> Callable[[], None]:
    """One forward + backward of the run's model on random tokens of the run's batch shape
    (no optimizer step, gradients cleared): what ``auto`` times in fp32 and in bf16, before the
    timed steps, on rank 0 (every rank trains in what it chose)."""
    t = cell.spec_as(TrainSpec)
    x = torch.randint(0, cell.model.vocab_size, (t.batch_size, t.seq_len), generator=torch.Generator().manual_seed(0))
    x = x.to(device)  # (B, T) token ids

    def step() -> None:
        model(x, x).loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def train_cell(
    cell: Cell,
    variant: Variant,
    data: Any,
    device: torch.device,
    progress: Progress | None = None,
    checkpoint_dir: Path | None = None,
    live: Callable[[list[Metric]], None] | None = None,
) -> CellOutcome:
    t = cell.spec_as(TrainSpec)
    distributed.local_batch_size(t.batch_size)  # the global batch must split evenly over ranks
    main = distributed.is_main()
    torch.manual_seed(cell.seed)
    model = build_model(variant, cell).to(device)
    facts = _facts(variant, cell, model.num_params())
    steps = planned_steps(cell, facts["train_flops_per_token"])
    budget = _Budget(steps, t.budget.seconds, collections.deque(maxlen=16))
    opt = make_optimizer(model, cell)
    gen = torch.Generator().manual_seed(cell.seed)  # batch order: the seed alone, not the variant or init
    stream = BatchStream(data)
    path = train_state.state_path(cell, checkpoint_dir)
    p, rank_rngs = (
        train_state.resume(path, cell, model, opt, gen, device) if path else (train_state.TrainProgress(), [])
    )
    _seed_ranks(cell, rank_rngs, p.step)
    compiled, compile_info = maybe_compile(model, t.compile)
    fwd = distributed.wrap_model(compiled, device)  # DDP in a process group, else the model
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    status, error, rows, sent = "done", None, [], len(p.metrics)  # restored points were sent before
    precision = distributed.main_value(lambda: resolve(device, t.precision, _probe_step(model, cell, device)))
    load_before = machine_load()
    model.train()
    while not budget.done(p.step, p.train_time):
        out, loss, lr, log_now = _timed_step(p, budget, fwd, model, opt, stream, cell, gen, device, precision)
        done = budget.done(p.step, p.train_time)
        if (log_now or done) and loss is not None:  # a log step (the last one is) reads the loss
            error = _log(p, cell, out, loss, lr)
            if error:
                status = "diverged"
                break
        if (p.step % t.eval_interval == 0 or done) and main:  # evaluated once, by rank 0
            rows = _evaluate(p, model, data, cell, device, final=done)
        if (log_now or done) and progress:  # after evaluating, so the line shows this step's val loss
            progress(p.step, budget.steps or 0, loss, val=p.headline.get("loss"))
        if live and main and len(p.metrics) > sent:  # the new curve points, to live trackers
            live(p.metrics[sent:])
            sent = len(p.metrics)
        saving = path is not None and p.step % t.checkpoint_interval == 0
        if path is not None and saving and not done:
            train_state.save(path, cell, model, opt, gen, p)
        if p.step % t.eval_interval == 0 or done or saving:
            distributed.barrier()  # the other ranks wait here, outside their timed steps
    after = _AfterTraining(cell, model, data, device, main)  # its failures are stored beside the results
    checkpoint = after.checkpoint(p.step, checkpoint_dir, path, status == "done")
    summary = _summary(
        p, cell, facts, device, status, checkpoint, compile_info | optimizer_record(opt), precision
    ) | _measured(p, rows, stream, load_before)
    rows = after.lengths(rows, summary) if status == "done" else rows
    return after.outcome(CellOutcome(status, summary, p.metrics, rows, error))


class _AfterTraining:
    """Steps after a finished training, on rank 0 (final checkpoint, length evaluation): one that
    fails keeps the cell's metrics and results, and its error is stored beside them."""

    def __init__(self, cell: Cell, model: Any, data: Any, device: torch.device, main: bool) -> None:
        self.cell, self.model, self.data, self.device, self.main = cell, model, data, device, main
        self.errors: list[str] = []

    def attempt(self, what: str, step: Callable[..., Any], *args: Any) -> Any:
        try:
            return step(*args)
        except Exception as exc:  # a missing package, a full disk: the trained results stay
            self.errors.append(f"{what} failed: {type(exc).__name__}: {exc}")
            return None

    def checkpoint(self, step: int, checkpoint_dir: Path | None, path: Path | None, done: bool) -> Any:
        if not self.main:
            return None
        args = (self.cell, self.model, self.data, step, checkpoint_dir, path, done)
        return self.attempt("saving the final checkpoint", _finish_files, *args)

    def lengths(self, rows: list[Result], summary: dict) -> list[Result]:
        if not self.main:
            return rows
        args = (self.model, self.data, self.cell, self.device, rows, summary)
        return self.attempt("evaluating at eval_lengths", _lengths, *args) or rows

    def outcome(self, outcome: CellOutcome) -> CellOutcome:
        if self.errors:
            outcome.summary["after_training_errors"] = self.errors
            note = "; ".join(self.errors) + " (training finished: its metrics and results are stored)"
            outcome.error = outcome.error or note
        return outcome
