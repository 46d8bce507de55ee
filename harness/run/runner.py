"""Running a suite: expand into cells, skip the ones already stored, run the rest, and
store each finished cell atomically (so an interrupted suite resumes where it stopped).

The cells run through an executor (``attnbench.run.executors``: here, or as Ray tasks); only
this process (under torchrun: rank 0) writes the store. Before a cell trains, the driver claims
it in the store (a lease, ``attnbench.store.leases``): a second driver on the same store takes
the other cells, then waits for the ones the first holds to be stored, and runs one itself only
if the first ends without storing it."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import torch

from attnbench import distributed
from attnbench.contract.variant import Variant
from attnbench.data.loading import load_corpus
from attnbench.errors import DistributedError
from attnbench.experiments.base import CellOutcome
from attnbench.experiments.registry import expand_suite, get_kind, newly_linked
from attnbench.gate.verdicts import Verdict, cell_lengths, gate_variant
from attnbench.plan.after_tuning import runnable, unread
from attnbench.plan.cells import Cell
from attnbench.plan.halving import next_cells, nothing_chosen, planned_total, point_text
from attnbench.plan.replication import next_replication_cells
from attnbench.plan.requirements import require_packages
from attnbench.plan.seed_rounds import adds_cells, next_seed_cells
from attnbench.plan.suite import Suite
from attnbench.registry.loader import Registry
from attnbench.run.cell import CellJob, cell_record, run_cell
from attnbench.run.executors import Executor, Finished, InProcessExecutor, Task, WorkerDeath
from attnbench.run.heap import heap_choice
from attnbench.run.progress import ProgressLine
from attnbench.store import leases
from attnbench.store.database import Store
from attnbench.store.provenance import device_name, resolve_device
from attnbench.track.base import LiveCell, Tracker, track_record

LEASE_POLL_S = 1.0  # how often a driver looks again at cells another driver holds


@dataclass
class RunReport:
    cells: int = 0
    skipped: int = 0
    ran: int = 0
    not_done: list[str] = field(default_factory=list)  # "variant/experiment: status (error)"


def _plan(suite: Suite, registry: Registry, dev: torch.device, only_variants: list[str] | None) -> list[Cell]:
    cells = expand_suite(
        suite,
        registry,
        device=device_name(dev),
        only_variants=only_variants,
        corpus_hash=lambda spec: load_corpus(spec, registry).sha256,
        build=True,  # every model size built once: a size a builder refuses fails here, not on every seed
    )
    for cell in cells:  # under torchrun: a global batch that does not split is refused up front
        batch_size = getattr(cell.spec, "batch_size", None)  # the kinds that train have one
        if get_kind(cell.kind).data_parallel and batch_size is not None:
            try:
                distributed.local_batch_size(batch_size)
            except DistributedError as exc:
                raise DistributedError(f"experiment {cell.experiment!r}: {exc}") from None
    return cells


class _SuiteRun:
    """One driver's pass over a suite's cells: gate, submit, record, finalize."""

    def __init__(
        self,
        suite: Suite,
        store: Store | None,
        registry: Registry,
        dev: torch.device,
        cells: list[Cell],
        out: TextIO,
        executor: Executor,
        trackers: Sequence[Tracker] = (),
        retry_failed: bool | None = None,
    ) -> None:
        self.suite, self.store, self.registry, self.dev, self.cells = suite, store, registry, dev, list(cells)
        self.out, self.executor, self.main = out, executor, distributed.is_main()
        self.report = RunReport(cells=len(runnable(cells)))  # templates are linked, never run
        self.total = planned_total(suite, cells)  # every rung of a tuned protocol included
        self.progress = ProgressLine(out if self.main else io.StringIO())
        self.checkpoint_dir = distributed.main_value(lambda: self._main_store().path.parent / "checkpoints")
        # A Ray worker sees the GPU Ray gave it as cuda:0.
        self.job_device = "cuda" if executor.remote and dev.type == "cuda" else str(dev)
        self.context = {
            "argv": sys.argv,
            "executor": executor.name,
            "overrides": list(suite.overrides),
            "suite_description": suite.description,  # the report shows it under its title
        }
        # variant, options, autocast, lengths
        self.verdicts: dict[tuple[str, str, tuple[str, ...] | None, tuple[int, ...]], Verdict] = {}
        self.jobs: dict[str, CellJob] = {}
        self.trackers = list(trackers)  # mirrors of each stored cell (the store stays the truth)
        self.live: dict[str, LiveCell | None] = {}  # cell key -> its live curve sink, while it runs here
        self.retry_failed = suite.retry_failed if retry_failed is None else retry_failed
        self.said: dict[str, str] = {}  # an error printed in full -> the first cell that had it
        self.started_at = time.time()  # a cell another driver stored since then is not run again
        self.waiting: dict[str, tuple[int, Cell, leases.Holder]] = {}  # cells another live driver holds

    def _main_store(self) -> Store:
        """The store, which rank 0 alone opens (the other ranks get its answers)."""
        if self.store is None:
            raise DistributedError("only the main process reads and writes the store")
        return self.store

    def verdict(self, cell: Cell, variant: Variant) -> Verdict:
        """The trust gate runs (on the driver) before a variant's first cell, per options."""
        autocast, lengths = _trains_under(cell, self.dev), cell_lengths(cell)  # lengths: the leak checks probe them
        gate_id = (cell.variant, repr(cell.model.options), autocast, lengths)
        if gate_id not in self.verdicts:
            if self.main:
                print(f"checking {cell.variant} (trust gate) ...", file=self.out, flush=True)
            self.verdicts[gate_id] = distributed.main_value(
                lambda: gate_variant(
                    variant,
                    self.store,
                    self.dev,
                    options=cell.model.options,
                    time_limit_s=self.suite.check_time_limit_s,
                    autocast=autocast,
                    lengths=lengths,
                )
            )
            verdict = self.verdicts[gate_id]
            if self.main:
                result = f"failed {verdict.failed}" if verdict.failed else "passed"
                source = "verdict cached in the store for this code" if verdict.cached else "checks ran now"
                print(f"  trust gate {cell.variant}: {result} ({source})", file=self.out, flush=True)
                for r in verdict.results:  # why, in the log: a verdict that timed out is not stored
                    if r.status in ("fail", "error"):
                        print(f"    {r.check}: {r.status}: {r.detail}", file=self.out, flush=True)
        return self.verdicts[gate_id]

    def take(self, finished: list[Finished]) -> None:
        """Record what the executor reports: worker deaths first, then the finished tasks."""
        for death in self.executor.deaths():
            self.record_death(death)
        for done in finished:
            self.record(done)

    def _name(self, key: str) -> str:
        job = self.jobs[key]
        return "[{}/{}] {}/{} seed {}".format(*job.index, job.cell.experiment, job.cell.variant, job.cell.seed)

    def record_death(self, death: WorkerDeath) -> None:
        """One line for a dead worker, and an attempt stored for each cell it cost one."""
        if not self.main:
            return
        for lost in death.killed:
            job = self.jobs[lost.task.key]
            rec = cell_record(job, CellOutcome("failed", error=lost.error), lost.started_at, lost.finished_at)
            rec.provenance["worker"] = lost.worker
            self._main_store().save_attempt(rec, "worker died")
        cost = ", ".join(
            f"{self._name(d.task.key)} (attempt {d.attempts} of {d.task.retries + 1}; "
            f"{'runs again' if d.task.key in death.again else 'failed'})"
            for d in death.killed
        )
        beside = ", ".join(self._name(t.key) for t in death.interrupted)
        print(
            f"a worker process died ({death.how}) running {cost}" + (f"; run again: {beside}" if beside else ""),
            file=self.out,
            flush=True,
        )

    def record(self, done: Finished) -> None:
        if not self.main:
            return
        job = self.jobs[done.task.key]
        rec = (
            done.value
            if done.error is None
            else cell_record(job, CellOutcome("failed", error=done.error), done.started_at, done.finished_at)
        )
        if done.worker:  # the process and torch threads that ran it
            rec.provenance["worker"] = done.worker
        self._main_store().save_run_or_set_aside(rec)
        self.report.ran += 1
        track_record(self.trackers, rec, self.live.pop(job.cell.key, None))
        if rec.status == "done" and rec.error:  # trained and stored; a step after training failed
            self.report.not_done.append(
                f"{job.cell.experiment}/{job.cell.variant} seed {job.cell.seed}: done, results stored, but {rec.error}"
            )
            print("[{}/{}] done, results stored, but: {}".format(*job.index, rec.error), file=self.out)
        elif rec.status == "diverged" and job.cell.coords.get("stage") == "tune":  # data to the search, no fault
            said = f"tuning point {point_text(job.cell)} diverged ({rec.error}): ranked last, the search goes on"
            print("[{}/{}] {}".format(*job.index, said), file=self.out)
        elif rec.status != "done":
            name = f"{job.cell.experiment}/{job.cell.variant} seed {job.cell.seed}"
            first = self.said.setdefault(str(rec.error), name)  # a full disk fails every cell alike: said once
            error = rec.error if first == name else f"the same error as {first}"
            self.report.not_done.append(f"{name}: {rec.status} ({error})")
            if done.worker and done.worker.get("died"):
                return  # record_death said it
            print("[{}/{}] {}: {}".format(*job.index, rec.status, error), file=self.out)  # which of several

    def submit(self, i: int, cell: Cell) -> None:
        """Run ``cell`` unless it is stored; claimed by another live driver, it waits (``await_leased``)."""
        if distributed.main_value(lambda: self._main_store().settled(cell.key, self.retry_failed)):
            self.report.skipped += 1
            return
        if self._claim(i, cell):
            self.start(i, cell)

    def _claim(self, i: int, cell: Cell) -> bool:
        """Whether this driver now holds ``cell``'s lease; stored meanwhile, it is counted as
        stored; leased by a live driver, it waits in ``self.waiting``."""
        got = distributed.main_value(
            lambda: self._main_store().claim(cell.key, self.retry_failed, since=self.started_at)
        )
        if got == leases.CLAIMED:
            self.waiting.pop(cell.key, None)
            return True
        if not isinstance(got, leases.Holder):  # leases.STORED
            self.waiting.pop(cell.key, None)
            self.report.skipped += 1
            return False
        self.waiting[cell.key] = (i, cell, got)
        return False

    def await_leased(self) -> None:
        """Cells another driver holds: each is taken over once its lease is gone (its owner ended
        without storing it) and skipped once stored; meanwhile finished cells are recorded. A cell
        taken over here that runs on the driver waits in turn for the rest (a nested call: every
        driver defers cells in the suite's one order, so no two drivers wait for each other)."""
        said = False
        while self.waiting:
            progressed = False
            for key, (i, cell, _) in list(self.waiting.items()):
                if key in self.waiting and self._claim(i, cell):  # (a nested wait may have taken it)
                    self.start(i, cell)
                progressed = progressed or key not in self.waiting
            if progressed:
                continue
            finished = self.executor.drain()  # cells of ours in flight: store them while waiting
            self.take(finished)
            if finished:
                continue
            if self.main and not said:
                holders = sorted({h.text() for _, _, h in self.waiting.values()})
                print(
                    f"waiting for {len(self.waiting)} cell(s) that another driver is training "
                    f"({'; '.join(holders)}); each runs here if that driver ends without storing it",
                    file=self.out,
                    flush=True,
                )
                said = True
            time.sleep(LEASE_POLL_S)

    def start(self, i: int, cell: Cell) -> None:
        """Gate, then run a cell this driver has claimed."""
        variant = self.registry.get(cell.variant)
        verdict = self.verdict(cell, variant)
        if verdict.failed and not self.suite.allow_failed_checks:
            distributed.main_value(lambda: self._main_store().release(cell.key, "refused"))
            self.report.not_done.append(
                f"{cell.experiment}/{cell.variant} seed {cell.seed}: refused, failed checks "
                f"{verdict.failed} (reproduce: `{verdict.command}`; set allow_failed_checks: true "
                "in the suite to record its numbers marked as failing)"
            )
            return
        job = self.jobs[cell.key] = CellJob(
            cell,
            variant,
            self.registry,
            self.job_device,
            self.checkpoint_dir,
            {"key": verdict.key, "failed": verdict.failed},
            (i, self.total),
            self.context,
        )
        kind = get_kind(cell.kind)
        live = self.live[cell.key] = LiveCell.for_cell(self.trackers, cell)  # used when it runs here
        task = Task(
            cell.key,
            run_cell,
            (job,),
            {"store": self.store, "progress": self.progress, "out": self.out, "live": live},
            num_cpus=self.suite.cpus_per_cell,
            num_gpus=1 if self.dev.type == "cuda" else 0,
            retries=self.suite.retries,
            # a timed cell beside cells training in a local pool would time the contention
            on_driver=kind.on_driver or (kind.timed and self.executor.shares_machine),
        )
        if task.on_driver:  # it reads earlier cells from the store, or must run alone: store them first
            self.await_leased()  # those another driver trains too
            self.take(self.executor.drain())
        self.take(self.executor.submit(task))

    def next_wave(self) -> list[Cell]:
        """Store what is in flight, then plan the cells the stored outcomes make runnable."""
        if not any(c.coords.get("stage") for c in self.cells) and not adds_cells(self.suite):
            return []
        self.take(self.executor.drain())
        wave = distributed.main_value(self._plan_wave)
        known = {c.key for c in self.cells}
        wave = list({c.key: c for c in wave if c.key not in known}.values())
        self.cells += wave  # a wave with no new cell (whatever planned it) ends the run: no re-planning loop
        self.report.cells = len(runnable(self.cells))
        self.total = max(self.total, self.report.cells)
        return wave

    def _plan_wave(self) -> list[Cell]:
        """The next rungs and seed rounds, then the cells that read final cells among them."""
        wave = [
            *next_cells(self.suite, self.cells, self._main_store().outcome),
            *next_seed_cells(self.suite, self.cells, self._main_store().outcome),  # seeds until decided
            *next_replication_cells(self.suite, self.cells, self._main_store().outcome),  # decisions on fresh seeds
        ]
        return wave + newly_linked(self.suite, [*self.cells, *wave]) if wave else []

    def finish(self) -> RunReport:
        self.take(self.executor.drain())
        if self.main:
            for name in dict.fromkeys(c.experiment for c in self.cells):
                group = [c for c in self.cells if c.experiment == name]
                finalize = get_kind(group[0].kind).finalize
                if finalize is not None:
                    finalize(group, self.store, self.dev)
            for line in unread(self.cells):  # templates that found nothing to read: said, not dropped
                print(f"note: {line}", file=self.out)
            for line in nothing_chosen(self.cells, self._main_store().outcome):
                print(f"note: {line}", file=self.out)
                self.report.not_done.append(line)
        return self.report


def prepare_run(
    suite: Suite, registry: Registry, *, device: str | None = None, only_variants: list[str] | None = None
) -> list[Cell]:
    """The cells a run of ``suite`` plans, after every check that can refuse it (heap setting,
    extras installed, variants known, batch split under torchrun, every model size built once).
    Creates nothing: the command opens the store and trackers only once this has passed, so a
    refused run leaves no file."""
    heap_choice()  # a bad ATTNBENCH_HEAP stops the run here, not in a worker
    require_packages(suite)  # before any data loads or cell trains
    return _plan(suite, registry, resolve_device(device or suite.device), only_variants)


def run_suite(
    suite: Suite,
    store: Store | None,
    registry: Registry,
    *,
    device: str | None = None,
    only_variants: list[str] | None = None,
    out: TextIO | None = None,
    executor: Executor | None = None,
    trackers: Sequence[Tracker] = (),
    retry_failed: bool | None = None,
    cells: list[Cell] | None = None,
) -> RunReport:
    """Run every cell of ``suite`` not already in ``store`` and store each as it finishes.

    ``executor`` runs the cells (default: here, one after another); this process alone
    writes the store. Under torchrun every rank calls this; ``store`` is None on ranks
    other than 0, and rank 0 decides for all of them what runs. A cell whose stored attempt
    failed runs again when ``retry_failed`` (None: the suite's setting, default yes).
    ``out``: progress and gate lines (default: sys.stderr as it is at the call, not at import).
    ``cells``: what ``prepare_run`` planned (None: planned here).
    """
    stream: TextIO = sys.stderr if out is None else out
    if cells is None:
        cells = prepare_run(suite, registry, device=device, only_variants=only_variants)
    dev = resolve_device(device or suite.device)
    run = _SuiteRun(suite, store, registry, dev, cells, stream, executor or InProcessExecutor(), trackers, retry_failed)
    wave, done = cells, 0
    while wave:  # a tuned protocol's later rungs exist once the rung before them is stored
        for cell in runnable(wave):
            done += 1
            run.submit(done, cell)
        run.await_leased()  # the cells of this wave that another driver holds, stored by it or here
        wave = run.next_wave()
    return run.finish()


def _trains_under(cell: Cell, device: torch.device) -> tuple[str, ...] | None:
    """The autocast dtypes a cell may train in, for the gate to check with their tolerances:
    None (the device's default: CUDA bf16 and fp16) except on a CPU, where train.precision
    bf16 or auto gives ("bf16",) (auto's probe, run per cell, may choose it) and fp32 ()."""
    if device.type != "cpu":
        return None
    return ("bf16",) if getattr(cell.spec, "precision", "fp32") in ("bf16", "auto") else ()
