"""Training one `train` cell, top to bottom: setup (model, optimizer, schedule, budget, batches),
the loop (steps, clipping, logging, evaluation, checkpoints, divergence), the held-out evaluation.
Beside it: the training state it resumes from (``state.py``), its summary (``summary.py``),
evaluation at other lengths (``lengths.py``), the null levels (``floors.py``).

Under torchrun the same loop trains data-parallel (``attnbench.distributed``): the suite's
batch_size is the global batch, each rank trains on its shard of it, and rank 0 alone
evaluates, checkpoints and reports; budgets count global tokens."""

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
import torch.nn.functional as F

from attnbench import distributed
from attnbench.contract.variant import Variant
from attnbench.data.floors import targets_fingerprint
from attnbench.errors import TrainingError
from attnbench.experiments.base import CellOutcome, Progress
from attnbench.experiments.machine import machine_load
from attnbench.experiments.train import state as train_state
from attnbench.experiments.train.lengths import with_length_rows
from attnbench.experiments.train.summary import headline, measured, summary
from attnbench.nn.backbone import Backbone
from attnbench.nn.compile import maybe_compile
from attnbench.nn.flops import model_facts
from attnbench.nn.model import LanguageModel, as_language_model
from attnbench.nn.precision import Precision, autocast_for, resolve
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.database import Metric, Result

# -- setup: the model, the optimizer, the schedule, the budget, the batches ---------------------


def build_model(variant: Variant, cell: Cell) -> LanguageModel:
    if cell.spec_as(TrainSpec).model_kind == "own":  # validated with the suite (plan/validation.py)
        if variant.build_model is None:
            raise TrainingError(f"variant {variant.name!r} has no model of its own; use model_kind: backbone")
        return as_language_model(variant.build_model(cell.model), variant.name)
    return Backbone(cell.model, variant.build_mixer)


def make_optimizer(model: torch.nn.Module, cell: Cell) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not biases, norms or gains); fused (the same update, ~3x
    faster on a CPU for the default suite's models) where every parameter is on a CPU or CUDA device."""
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


def lr_at(step: int, progress: float, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to lr * min_ratio as the
    budget's progress (fraction of steps, or of seconds) goes from 0 to 1."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(1.0, max(0.0, progress))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


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


def _facts(variant: Variant, cell: Cell, n_params: int) -> dict[str, Any]:
    t = cell.spec_as(TrainSpec)
    facts = model_facts(variant, cell.model, t.seq_len, n_params)
    if t.model_kind == "own":  # declared facts describe the shared-backbone mixer
        facts.update(
            state_elements=None, mixer_flops_per_token=None, fwd_flops_per_token=None, train_flops_per_token=None
        )
    return facts


@dataclass
class _Budget:
    """When to stop: after ``steps``, or when ``seconds`` of training time are spent."""

    steps: int | None
    seconds: float | None
    recent: collections.deque  # last step times (seconds)

    def done(self, step: int, train_time: float) -> bool:
        # A wall-clock budget stops where the next step would overshoot more than stopping now undershoots
        # (a typical step: the median of recent ones): every variant's training time is within half a step of it.
        if self.steps is not None:
            return step >= self.steps
        typical = statistics.median(self.recent) if self.recent else 0.0
        return train_time + 0.5 * typical >= self._seconds()

    def fraction(self, step: int, train_time: float) -> float:
        return step / self.steps if self.steps is not None else train_time / self._seconds()

    def _seconds(self) -> float:
        if self.seconds is None:  # planned_steps gives steps for every budget but a seconds one
            raise TypeError("a training budget needs steps or seconds")
        return self.seconds


class BatchStream:
    """The training batches a cell draws, fingerprinted. Their order follows the cell's seed alone: cells of
    different variants with the same seed draw the same batches, the pairing the comparison uses."""

    def __init__(self, data: Any) -> None:
        self.data, self.sha256, self.batches = data, hashlib.sha256(), 0

    def train_batch(self, batch_size: int, seq_len: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data.train_batch(batch_size, seq_len, gen)  # (B, T), (B, T)
        self.sha256.update(x.numpy().tobytes() + y.numpy().tobytes())
        self.batches += 1
        return x, y

    def record(self, resumed_from: int | None) -> dict[str, Any]:
        return {"sha256": self.sha256.hexdigest(), "batches": self.batches, "from_step": resumed_from or 0}


def _seed_ranks(cell: Cell, rank_rngs: list[torch.Tensor], step: int) -> None:
    """Each rank draws its own dropout masks, restored exactly on resume."""
    if not distributed.active():
        return
    if len(rank_rngs) == distributed.world_size():
        torch.set_rng_state(rank_rngs[distributed.rank()].cpu())
    else:
        torch.manual_seed(cell.seed + 1_000_003 * distributed.rank() + step)


def _probe_step(model: torch.nn.Module, cell: Cell, device: torch.device) -> Callable[[], None]:
    """One forward + backward on random tokens of the run's batch shape (gradients cleared): what
    precision ``auto`` times in fp32 and in bf16 before the timed steps, on rank 0."""
    t = cell.spec_as(TrainSpec)
    x = torch.randint(0, cell.model.vocab_size, (t.batch_size, t.seq_len), generator=torch.Generator().manual_seed(0))
    x = x.to(device)  # (B, T) token ids

    def step() -> None:
        model(x, x).loss.backward()
        model.zero_grad(set_to_none=True)

    return step


# -- the loop ---------------------------------------------------------------------------------


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
    budget = _Budget(
        planned_steps(cell, facts["train_flops_per_token"]), t.budget.seconds, collections.deque(maxlen=16)
    )
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
    record = summary(p, cell, facts, device, status, checkpoint, compile_info | optimizer_record(opt), precision)
    record |= measured(p, rows, stream, load_before)
    rows = after.lengths(rows, record) if status == "done" else rows
    return after.outcome(CellOutcome(status, record, p.metrics, rows, error))


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
        return self.attempt("saving the final checkpoint", train_state.finish, *args)

    def lengths(self, rows: list[Result], record: dict) -> list[Result]:
        if not self.main:
            return rows
        args = (self.model, self.data, self.cell, self.device, rows, record)
        return self.attempt("evaluating at eval_lengths", with_length_rows, *args) or rows

    def outcome(self, outcome: CellOutcome) -> CellOutcome:
        if self.errors:
            outcome.summary["after_training_errors"] = self.errors
            note = "; ".join(self.errors) + " (training finished: its metrics and results are stored)"
            outcome.error = outcome.error or note
        return outcome


# -- evaluation -------------------------------------------------------------------------------


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
            tags = {"split": "val", "task": task.name, **task.coords(data.options), **e.tags}
            rows.append(Result(e.name, e.value, e.unit, tags))
    model.train(was_training)
    return rows
