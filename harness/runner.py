"""Running a suite: expand into cells, skip the ones already stored, run the rest, and
store each finished cell atomically (so an interrupted suite resumes where it stopped)."""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, TextIO

import torch

from .cells import Cell, expand
from .data import load_corpus
from .plugins import Registry
from .provenance import device_name, provenance, resolve_device
from .gate import Verdict, gate_variant
from .experiment import CellOutcome, RunContext, kind_finalizers, kind_runners
from .store import RunRecord, Store
from .suite import Suite


@dataclass
class RunReport:
    cells: int = 0
    skipped: int = 0
    ran: int = 0
    not_done: list[str] = field(default_factory=list)  # "variant/experiment: status (error)"


class ProgressLine:
    """One updating status line on a terminal; plain lines when output is a file."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.tty = out, out.isatty()
        self._last = 0.0

    def cell(self, i: int, n: int, cell: Cell) -> Callable[[int, int, float | None], None]:
        label = f"[{i}/{n}] {cell.experiment} {cell.variant} d{cell.model.d_model}x{cell.model.n_layer} seed {cell.seed}"
        print(label, file=self.out, flush=True)

        def update(step: int, total: int, loss: float | None) -> None:
            now = time.monotonic()
            if step != total and now - self._last < (0.5 if self.tty else 15.0):
                return
            self._last = now
            msg = f"  step {step}/{total} loss {loss:.4f}" if loss is not None else f"  step {step}/{total}"
            print(("\r" + msg) if self.tty else msg, end="" if self.tty and step != total else "\n",
                  file=self.out, flush=True)

        return update


def run_suite(
    suite: Suite, store: Store, registry: Registry, *, device: str | None = None,
    only_variants: list[str] | None = None, out: TextIO = sys.stderr,
) -> RunReport:
    dev = resolve_device(device or suite.device)
    cells = expand(suite, registry, device=device_name(dev), only_variants=only_variants,
                   corpus_hash=lambda spec: load_corpus(spec, registry).sha256)
    report = RunReport(cells=len(cells))
    progress = ProgressLine(out)
    checkpoint_dir = store.path.parent / "checkpoints"
    runners = kind_runners()
    verdicts: dict[tuple[str, str], Verdict] = {}
    for i, cell in enumerate(cells, 1):
        if store.has_run(cell.key):
            report.skipped += 1
            continue
        variant = registry.get(cell.variant)
        gate_id = (cell.variant, repr(cell.model.options))
        if gate_id not in verdicts:  # the trust gate runs before a variant's first cell
            print(f"checking {cell.variant} (trust gate) ...", file=out, flush=True)
            verdicts[gate_id] = gate_variant(variant, store, dev, options=cell.model.options)
        verdict = verdicts[gate_id]
        if verdict.failed and not suite.allow_failed_checks:
            report.not_done.append(
                f"{cell.experiment}/{cell.variant} seed {cell.seed}: refused, failed checks "
                f"{verdict.failed} (see `attnbench check {cell.variant}`; set allow_failed_checks: true "
                "in the suite to record its numbers marked as failing)")
            continue
        started = time.time()
        ctx = RunContext(dev, progress.cell(i, len(cells), cell), checkpoint_dir, store, registry)
        try:
            outcome = runners[cell.kind](cell, variant, ctx)
        except torch.OutOfMemoryError as exc:
            outcome = CellOutcome("oom", error=f"out of memory: {str(exc).splitlines()[0]}")
        except Exception as exc:  # a broken plugin fails its cell, not the suite
            outcome = CellOutcome("failed", error="".join(traceback.format_exception_only(exc)).strip())
            traceback.print_exc(file=out)
        store.save_run(RunRecord(
            cell_key=cell.key, suite=cell.suite, experiment=cell.experiment, kind=cell.kind,
            variant=cell.variant, status=outcome.status, seed=cell.seed, coords=cell.coords,
            config={**cell.config_dict(), "key_inputs": cell.key_inputs},
            provenance={**provenance(dev), "variant": cell.key_inputs.get("variant"),
                        "corpus_sha256": cell.key_inputs.get("corpus_sha256"),
                        "gate": {"key": verdict.key, "failed": verdict.failed}},
            summary=outcome.summary, started_at=started, finished_at=time.time(), error=outcome.error,
            metrics=outcome.metrics, results=outcome.results,
        ))
        report.ran += 1
        if outcome.status != "done":
            report.not_done.append(f"{cell.experiment}/{cell.variant} seed {cell.seed}: {outcome.status} ({outcome.error})")
            print(f"  {outcome.status}: {outcome.error}", file=out)
    finalizers = kind_finalizers()
    for name in dict.fromkeys(c.experiment for c in cells):
        group = [c for c in cells if c.experiment == name]
        if group[0].kind in finalizers:
            finalizers[group[0].kind](group, store, dev)
    return report
