"""One cell, run where it is called (the driver, a pool worker, a Ray worker, each torchrun
rank): what it needs as plain values (``CellJob``), the run itself with its failures kept as
data (``run_cell``), and the row set it stores with the provenance of the process that ran it."""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from attnbench import distributed
from attnbench.contract.variant import Variant
from attnbench.errors import DiskFullError
from attnbench.experiments.base import CellOutcome, RunContext
from attnbench.experiments.registry import get_kind
from attnbench.plan.cells import Cell
from attnbench.registry.loader import Registry
from attnbench.run.heap import heap_record, keep_freed_heap
from attnbench.run.progress import ProgressLine
from attnbench.store.database import RunRecord, Store
from attnbench.store.provenance import provenance
from attnbench.track.base import LiveCell


@dataclass(frozen=True)
class CellJob:
    """What running one cell needs, as plain values that can travel to another process."""

    cell: Cell
    variant: Variant
    registry: Registry
    device: str
    checkpoint_dir: Path
    gate: dict[str, Any]  # the trust gate's verdict: {"key": ..., "failed": [...]}
    index: tuple[int, int]  # (i, n): the cell's place in the suite, for progress lines
    context: dict[str, Any] = field(default_factory=dict)  # provenance from the driver (argv, executor)


def cell_record(job: CellJob, outcome: CellOutcome, started: float, finished: float) -> RunRecord:
    """The row set one cell stores, with provenance of the process that ran it."""
    cell = job.cell
    parallel = get_kind(cell.kind).data_parallel  # every torchrun rank runs it together
    return RunRecord(
        cell_key=cell.key,
        suite=cell.suite,
        experiment=cell.experiment,
        kind=cell.kind,
        variant=cell.variant,
        status=outcome.status,
        seed=cell.seed,
        coords=cell.coords,
        config={**cell.config_dict(), "key_inputs": cell.key_inputs},
        provenance={
            **provenance(torch.device(job.device)),
            "heap": heap_record(),
            **job.context,
            "variant": cell.key_inputs.get("variant"),
            "corpus_sha256": cell.key_inputs.get("corpus_sha256"),
            "gate": job.gate,
            "distributed": {
                "world_size": distributed.world_size() if parallel else 1,
                "backend": distributed.backend() if parallel else None,
            },
        },
        summary=outcome.summary,
        started_at=started,
        finished_at=finished,
        error=outcome.error,
        metrics=outcome.metrics,
        results=outcome.results,
    )


def _agree(outcome: CellOutcome) -> CellOutcome:
    """Under torchrun, a cell that failed on any rank is recorded as failed by rank 0."""
    for r, (status, error) in enumerate(distributed.all_gather((outcome.status, outcome.error))):
        if status != "done" and outcome.status == "done":
            outcome.status, outcome.error = status, f"on rank {r}: {error}"
    return outcome


def run_cell(
    job: CellJob,
    *,
    store: Store | None = None,
    progress: ProgressLine | None = None,
    out: TextIO | None = None,
    live: LiveCell | None = None,
) -> RunRecord | None:
    """Run one cell where this is called (the driver, a Ray worker, each torchrun rank) and
    return its record; None on torchrun ranks other than 0, which store nothing."""
    cell, dev = job.cell, torch.device(job.device)
    keep_freed_heap()  # once per process: recorded with the cell (heap_record)
    stream: TextIO = out if out is not None else sys.stderr
    parallel = distributed.active() and get_kind(cell.kind).data_parallel
    if distributed.active() and not parallel and not distributed.is_main():
        return None  # rank 0 runs it alone
    started = time.time()
    ctx = RunContext(
        dev, (progress or ProgressLine(stream)).cell(*job.index, cell), job.checkpoint_dir, store, job.registry, live
    )
    try:
        outcome = get_kind(cell.kind).run(cell, job.variant, ctx)
    except torch.OutOfMemoryError as exc:
        outcome = CellOutcome("oom", error=f"out of memory: {str(exc).splitlines()[0]}")
    except DiskFullError as exc:  # the message says it all; the driver prints it once per run
        outcome = CellOutcome("failed", error=str(exc))
    except Exception as exc:  # a broken plugin fails its cell, not the suite
        outcome = CellOutcome("failed", error="".join(traceback.format_exception_only(exc)).strip())
        traceback.print_exc(file=stream)
    if parallel:
        outcome = _agree(outcome)
    return cell_record(job, outcome, started, time.time()) if distributed.is_main() else None
