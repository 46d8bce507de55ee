"""What every experiment kind implements: ``run(cell, variant, ctx) -> CellOutcome``.

The runner owns skipping, storing and provenance; a kind only computes. Kinds are looked
up by name in ``kind_runners()`` (imported lazily so `validate` stays light).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .store import Metric, Result

Progress = Callable[[int, int, float | None], None]  # (step, total, last loss)


@dataclass
class CellOutcome:
    status: str  # "done", "diverged", "oom", "timeout", "failed", ...
    summary: dict[str, Any] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    error: str | None = None


@dataclass
class RunContext:
    device: torch.device
    progress: Progress
    checkpoint_dir: Path
    store: Any  # harness.store.Store; kinds that read earlier cells (lm_eval) use it
    registry: Any = None  # harness.plugins.Registry (variants and tasks)


KindRunner = Callable[..., CellOutcome]
# (experiment's cells, store, device) -> None: derived rows (fits, crossovers) computed
# once every cell of an experiment is stored; must be idempotent (key derived rows by
# the cell keys they were computed from).
Finalizer = Callable[..., None]


def kind_runners() -> dict[str, KindRunner]:
    from .lm_eval_runner import run_lm_eval_cell
    from .scaling import run_scaling_cell
    from .speed import run_speed_cell
    from .train import run_train_cell

    return {"train": run_train_cell, "speed": run_speed_cell, "scaling": run_scaling_cell,
            "lm_eval": run_lm_eval_cell}


def kind_finalizers() -> dict[str, Finalizer]:
    from .scaling import finalize_scaling
    from .speed_fits import finalize_speed

    return {"speed": finalize_speed, "scaling": finalize_scaling}
