"""A training cell's progress, saved periodically so an interrupted cell resumes exactly
(model, optimizer, RNGs, batch order, curves), and its final checkpoint."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnbench import distributed
from attnbench.errors import DiskFullError
from attnbench.nn.checkpoint import save_checkpoint
from attnbench.nn.model import LanguageModel
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.database import Metric


@dataclass
class TrainProgress:
    """What the loop has done so far (all of it goes into the training state)."""

    step: int = 0
    train_time: float = 0.0
    eval_time: float = 0.0
    metrics: list[Metric] = field(default_factory=list)
    headline: dict[str, float] = field(default_factory=dict)
    resumed_from: int | None = None
    resume_error: str | None = None


def state_path(cell: Cell, checkpoint_dir: Path | None) -> Path | None:
    if checkpoint_dir is None or not cell.spec_as(TrainSpec).checkpoint_interval:
        return None
    return checkpoint_dir / f"{cell.key}.state.pt"


def _read(path: Path, cell: Cell, device: torch.device) -> tuple[dict[str, Any] | None, str | None]:
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


def resume(
    path: Path, cell: Cell, model: LanguageModel, opt: torch.optim.Optimizer, gen: torch.Generator, device: torch.device
) -> tuple[TrainProgress, list[torch.Tensor]]:
    """Restore a saved state into model, optimizer and RNGs; rank 0 reads it and hands it
    to the other ranks. Returns the progress and the per-rank RNG states (may be empty)."""
    main = distributed.is_main()
    load_on = device if not distributed.active() else torch.device("cpu")
    state, error = distributed.main_value(lambda: _read(path, cell, load_on))
    if error and main:
        print(f"attnbench: warning: {error}", file=sys.stderr)
    if state is None:
        return TrainProgress(resume_error=error), []
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    torch.set_rng_state(state["torch_rng"].cpu())
    gen.set_state(state["gen"].cpu())
    progress = TrainProgress(
        state["step"],
        state["train_time"],
        state["eval_time"],
        [Metric(*m) for m in state["metrics"]],
        state["headline"],
        state["step"],
        error,
    )
    return progress, state.get("torch_rng_ranks") or []


def save(
    path: Path,
    cell: Cell,
    model: LanguageModel,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    progress: TrainProgress,
) -> None:
    """Every rank contributes its RNG state; rank 0 writes the file."""
    rngs = distributed.all_gather(torch.get_rng_state()) if distributed.active() else None
    if not distributed.is_main():
        return
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "step": progress.step,
            "train_time": progress.train_time,
            "eval_time": progress.eval_time,
            "torch_rng": torch.get_rng_state(),
            "gen": gen.get_state(),
            "metrics": [tuple(m.__dict__.values()) for m in progress.metrics],
            "headline": progress.headline,
            "cell_key": cell.key,
            **({"torch_rng_ranks": rngs} if rngs else {}),
        },
    )


def save_final(checkpoint_dir: Path, cell: Cell, model: LanguageModel, step: int, tokenizer: str | None = None) -> Path:
    """The trained model, for lm-eval, export and fine-tuning; ``tokenizer`` is the
    tokenizer.json text of a non-byte tokenizer (what evaluation and export must encode with)."""
    path = checkpoint_dir / f"{cell.key}.pt"
    extra = {"tokenizer": tokenizer} if tokenizer else {}
    try:
        save_checkpoint(
            path,
            {
                "model": model.state_dict(),
                "config": cell.model.to_dict(),
                "variant": cell.variant,
                "model_kind": cell.spec_as(TrainSpec).model_kind,
                "cell_key": cell.key,
                "step": step,
                **extra,
            },
        )
    except DiskFullError as exc:  # training finished: what is lost is the checkpoint
        raise DiskFullError(exc.where, "its final checkpoint was not kept") from exc
    return path


def finish(
    cell: Cell, model: Any, data: Any, step: int, checkpoint_dir: Path | None, path: Path | None, done: bool
) -> Path | None:
    """Rank 0, after training: the final checkpoint of a finished cell (when the cell keeps one),
    returned; the resume file removed."""
    try:
        if checkpoint_dir is not None and cell.spec_as(TrainSpec).checkpoint and done:
            return save_final(checkpoint_dir, cell, model, step, getattr(data, "tokenizer_json", None))
        return None
    finally:  # also when saving failed: the cell is stored as trained, so nothing resumes from it
        if path is not None:
            path.unlink(missing_ok=True)  # another driver that ran this cell may have removed it first
