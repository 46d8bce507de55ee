"""What every experiment kind implements (the ``Kind`` protocol) and what it returns.

The runner owns skipping, storing and provenance; a kind only computes. Kinds are found
by name in ``experiments.registry`` (a table of "module:attribute", imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.store.database import Metric, Result

if TYPE_CHECKING:  # a suite's cells are expanded and linked without torch
    import torch

# (step, total, last train loss, *, val=last val loss, label=e.g. "forward T=256")
Progress = Callable[..., None]


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
    store: Any  # attnbench.store.database.Store; kinds that read earlier cells (lm_eval) use it
    registry: Any = None  # attnbench.registry.loader.Registry (variants and tasks)
    # Curve points as they are logged, for live trackers (attnbench.track.base.LiveCell);
    # None where the cell runs away from the driver (a Ray worker): they get the stored record.
    live: Callable[[list[Metric]], None] | None = None


KindRunner = Callable[..., CellOutcome]
# (experiment's cells, store, device) -> None: derived rows (fits, crossovers) computed
# once every cell of an experiment is stored; must be idempotent (key derived rows by
# the cell keys they were computed from).
Finalizer = Callable[..., None]


@dataclass(frozen=True)
class Kind:
    """An experiment kind: how its cells run, what code they run, and what follows them
    (a kind that pairs its cells with those they read is linked from ``registry.LINK_TABLE``).

    ``code`` names the harness packages and modules whose code a cell of this kind runs;
    their contents are hashed into its cell keys, so editing any of them re-runs exactly
    the cells of the kinds that run it.
    """

    name: str
    run: KindRunner
    code: Sequence[str]
    finalize: Finalizer | None = None  # derived rows once every cell of an experiment is stored
    data_parallel: bool = False  # trains under torchrun on every rank
    on_driver: bool = False  # runs in the driver process (reads earlier cells' results)
    timed: bool = False  # measures the machine: runs with no other cell in flight here


# Code every kind runs: the plugin contract, the shared model and the data.
COMMON_CODE = (
    "attnbench.contract",
    "attnbench.nn",
    "attnbench.data",
    "attnbench.experiments.base",
    "attnbench.experiments.machine",
)


def trained_run(ctx: RunContext, cell: Any, purpose: str) -> dict[str, Any] | CellOutcome:
    """The stored training run a linked cell reads (lm_eval, finetune), or the outcome that
    says why there is nothing to ``purpose`` (not stored, or not finished)."""
    key = cell.key_inputs.get("train_cell_key")
    run = next((r for r in ctx.store.runs(suite=cell.suite) if r["cell_key"] == key), None)
    if run is not None and run["status"] == "done":
        return run
    why = "was not stored" if run is None else f"ended with status {run['status']!r}"
    return CellOutcome(
        "skipped", error=f"its training cell in {cell.spec.from_experiment!r} {why}; nothing to {purpose}"
    )
