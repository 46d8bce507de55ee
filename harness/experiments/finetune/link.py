"""Pairing each `finetune` cell with the trained cell whose checkpoint it tunes.

``link_finetune_cells`` (the kind's ``link``) replaces each finetune cell by one cell per
cell of ``from_experiment`` with its variant, model size and seed; the linked cell takes
that cell's model config, and its key includes the trained cell's key and PEFT's version:
re-training a cell re-tunes it. Bad input (no checkpoints, a rank above the model width,
a task the trained model's vocabulary or context cannot hold) fails here, at validate.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md

from attnbench.plan.cells import Cell, no_trained_cell_text, trained_cells_for
from attnbench.plan.downstream_spec import FinetuneSpec
from attnbench.plan.halving import tuned_source_error
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite, suite_error_at
from attnbench.store.provenance import content_key


def peft_version() -> str:
    try:
        return md.version("peft")
    except md.PackageNotFoundError:
        return "not installed"


def _source_error(suite: Suite, src: str) -> str | None:
    if (why := tuned_source_error(suite, src)) is not None:
        return why
    exps = {e.name: e for e in suite.experiments}
    if src not in exps:
        return f"no experiment named {src!r} in this suite; experiments: {sorted(exps)}"
    source = exps[src]
    if not isinstance(source, TrainExperiment) or not source.train.checkpoint:
        return (
            f"experiment {src!r} (kind {source.kind}) keeps no checkpoints; name a train "
            "experiment whose train.checkpoint is true"
        )
    return None


def _fit_error(cell: Cell, trained: Cell) -> tuple[tuple, str] | None:
    """(where, message) when the trained model cannot take this cell's data or rank."""
    spec, m = cell.spec_as(FinetuneSpec), trained.model
    if cell.model.vocab_size != m.vocab_size:
        return ("data",), (
            f"this data has a vocabulary of {cell.model.vocab_size} tokens but the models of "
            f"{spec.from_experiment!r} have {m.vocab_size}; fine-tune on data with the same "
            "tokenizer (bytes: a text corpus or a byte-level task such as text_recall)"
        )
    if spec.seq_len > m.context:
        return ("finetune", "seq_len"), (
            f"seq_len {spec.seq_len} exceeds the context {m.context} the models "
            f"of {spec.from_experiment!r} were built with; pretrain with a longer "
            "seq_len or models.context"
        )
    if spec.rank is not None and spec.rank > m.d_model:
        return ("finetune", "ranks"), (
            f"rank {spec.rank} is larger than the model width d_model = {m.d_model}: "
            f"a rank-r update of a d x d matrix needs r <= d; use ranks up to {m.d_model}"
        )
    return None


def _link(cell: Cell, trained: Cell) -> Cell:
    linked = dataclasses.replace(
        cell,
        model=trained.model,
        key="",
        key_inputs={},
        coords={
            **cell.coords,
            **trained.coords,
            "rank": cell.spec_as(FinetuneSpec).rank,
            "from_experiment": trained.experiment,
        },
    )
    if not cell.key:  # keys are not computed (``attnbench validate``)
        return linked
    inputs = {**cell.key_inputs, "config": linked.config_dict(), "train_cell_key": trained.key, "peft": peft_version()}
    return dataclasses.replace(linked, key=content_key(inputs), key_inputs=inputs)


def link_finetune_cells(suite: Suite, cells: list[Cell]) -> list[Cell]:
    """Each finetune cell, linked to its trained cells (see the module docstring); finetune
    cells go last so their checkpoints exist when they run. Idempotent."""
    if not any(c.kind == "finetune" and "from_experiment" not in c.coords for c in cells):
        return cells
    index = {e.name: i for i, e in enumerate(suite.experiments)}
    out = [c for c in cells if c.kind != "finetune"]
    for cell in cells:
        if cell.kind != "finetune":
            continue
        if "from_experiment" in cell.coords:
            out.append(cell)
            continue
        ei, src = index[cell.experiment], cell.spec_as(FinetuneSpec).from_experiment
        problem = _source_error(suite, src)
        if problem:
            raise suite_error_at(suite, ("experiments", ei, "finetune", "from_experiment"), problem)
        matches = trained_cells_for(cell, src, cells)
        if not matches:
            raise suite_error_at(suite, ("experiments", ei), no_trained_cell_text(cell, src))
        for t in matches:
            bad = _fit_error(cell, t)
            if bad:
                raise suite_error_at(suite, ("experiments", ei, *bad[0]), bad[1])
            out.append(_link(cell, t))
    return out
