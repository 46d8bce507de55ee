"""Cells that read a tuned experiment's trained cells: an ``lm_eval`` experiment whose
``from_experiment`` tunes by successive halving (``protocol.tuning``). What they read, the
chosen point's final cells, is planned only once the choice is stored (plan/halving.py). So
such an experiment's cells are planned with the suite as templates, marked ``awaits``, that
never run; each time the runner plans new cells, the kind's link pairs every template with
the source's final cells planned so far. Those cells' keys are part of the linked cells' keys,
so a resumed run links the same cells under the same keys and skips the stored ones."""

from __future__ import annotations

import dataclasses

from attnbench.plan.cells import SAME_MODEL, Cell, trained_cells_for
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite

AWAITS = "awaits"  # a template's coordinate: the tuned experiment whose final cells it reads


def tuned_source(suite: Suite, name: str) -> TrainExperiment | None:
    """Experiment ``name`` of ``suite`` where it tunes (a train experiment with protocol.tuning)."""
    exp = next((e for e in suite.experiments if e.name == name), None)
    if isinstance(exp, TrainExperiment) and exp.protocol is not None and exp.protocol.tuning is not None:
        return exp
    return None


def final_seeds(exp: TrainExperiment) -> list[int]:
    """The seeds the chosen point of ``exp`` may train on: its ``seeds``, and up to
    ``protocol.seeds.max`` where seeds are added until decided."""
    rule = exp.protocol.seeds if exp.protocol is not None else None
    return sorted(set(exp.seeds) | set(range(rule.max) if rule is not None else ()))


def awaiting(cell: Cell) -> bool:
    """Whether ``cell`` is a template that waits for a tuned experiment's final cells."""
    return AWAITS in cell.coords


def runnable(cells: list[Cell]) -> list[Cell]:
    """``cells`` without the templates (they are linked, never run)."""
    return [c for c in cells if not awaiting(c)]


def as_template(cell: Cell, source: str) -> Cell:
    """``cell`` marked as waiting for the final cells of experiment ``source``."""
    return dataclasses.replace(cell, coords={**cell.coords, AWAITS: source})


def final_cells_for(cell: Cell, source: str, cells: list[Cell]) -> list[Cell]:
    """The final cells of ``source`` planned so far with ``cell``'s variant, seed and model size."""
    return [t for t in trained_cells_for(cell, source, cells) if t.coords.get("stage") == "final"]


def template_error(cell: Cell, source: TrainExperiment, cells: list[Cell]) -> str | None:
    """Why template ``cell`` could never read a final cell of ``source``: ``source`` tunes no
    cell of its variant and model size (``cells`` holds its tuning cells), or its chosen point
    never trains ``cell``'s seed. None where it can."""
    size = tuple(getattr(cell.model, k) for k in SAME_MODEL)
    if not any(
        t.experiment == source.name
        and t.variant == cell.variant
        and tuple(getattr(t.model, k) for k in SAME_MODEL) == size
        for t in cells
    ):
        return (
            f"experiment {source.name!r} tunes no cell of variant {cell.variant!r}, model d_model "
            f"{cell.model.d_model} x {cell.model.n_layer} layers x {cell.model.n_head} heads; give this "
            f"{cell.kind} experiment the same variants and models (e.g. through the suite's defaults)"
        )
    seeds = final_seeds(source)
    if cell.seed not in seeds:
        return (
            f"experiment {source.name!r} trains its chosen point on seeds {seeds}, so seed {cell.seed} "
            f"has no checkpoint to read; give this {cell.kind} experiment seeds among {seeds}"
        )
    return None


def unread(cells: list[Cell]) -> list[str]:
    """One line per template of ``cells`` that no planned cell reads for: its source's chosen
    point never trained its seed (seeds added until decided stopped before it) or the source's
    tuning chose nothing. Said at the end of a run, never dropped silently."""
    linked = {(c.experiment, c.variant, c.seed, c.model.d_model, c.model.n_layer) for c in runnable(cells)}
    return [
        f"{c.experiment}: {c.variant} seed {c.seed} scored no checkpoint: experiment {c.coords[AWAITS]!r} "
        f"trained no final cell of it (its seeds stopped once decided, or its tuning chose nothing)"
        for c in cells
        if awaiting(c) and (c.experiment, c.variant, c.seed, c.model.d_model, c.model.n_layer) not in linked
    ]
