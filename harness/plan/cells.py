"""Suite -> cells (variant x model size x data x budget x seed x grid point), each with
a content key: a cell already stored under its key is skipped, and a code change of the
variant or of the harness's compute modules gives a new key. ``expand`` plans a suite that
plan/validation.py has checked (a ``CheckedSuite``); it checks nothing itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.data.spec import DataSpec
from attnbench.plan.base import ModelSpec, SpecT, spec_as
from attnbench.plan.protocol import Protocol
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite
from attnbench.plan.validation import Build, CheckedExperiment, CheckedSuite
from attnbench.registry.identity import variant_identity
from attnbench.store.provenance import content_key, library_versions


@dataclass(frozen=True)
class Cell:
    suite: str
    experiment: str
    kind: str
    variant: str
    model: ModelConfig
    data: DataSpec | None
    spec: BaseModel  # the experiment kind's mapping (TrainSpec for `train`), grid point applied
    seed: int
    coords: dict[str, Any] = field(hash=False)
    key: str = ""
    key_inputs: dict[str, Any] = field(default_factory=dict, hash=False)
    protocol: dict[str, Any] | None = field(default=None, hash=False)  # recorded with results, not keyed

    def spec_as(self, cls: type[SpecT]) -> SpecT:
        """``spec``, typed as ``cls`` (``TrainSpec`` for train, scaling and finetune cells)."""
        return spec_as(self.spec, cls, f"{self.kind} cell {self.experiment}/{self.variant}")

    def data_spec(self) -> DataSpec:
        """``data``, which every cell of a kind that trains (train, scaling, finetune) has."""
        if self.data is None:
            raise TypeError(f"{self.kind} cell {self.experiment}/{self.variant} has no data")
        return self.data

    def config_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "data": self.data.model_dump() if self.data else None,
            self.kind: self.spec.model_dump(),
            "seed": self.seed,
        }


def expand(checked: CheckedSuite, *, device: str = "", kind_code: Callable[[str], str] | None = None) -> list[Cell]:
    """Every cell of a suite that plan/validation.py ``check_suite`` passed: per build, one cell
    per seed. Keys are computed when ``kind_code`` (the hash of the code a kind runs) is given,
    with the corpus hash the check read; ``validate`` passes none. Kinds link their cells
    afterwards (``experiments.registry.expand_suite`` checks, expands and links)."""
    cells: list[Cell] = []
    for planned in checked.experiments:
        for run in planned.runs:
            keys = None
            if kind_code is not None:
                keys = _key_inputs(checked.suite, planned, run.variant, kind_code(planned.experiment.kind), device)
            for build in run.builds:
                cells += _seed_cells(checked.suite.name, planned, keys, build)
    return cells


def _key_inputs(
    suite: Suite, planned: CheckedExperiment, variant: Variant, harness: str, device: str
) -> dict[str, Any]:
    """What a cell's key hashes besides its config (``rekey`` adds that)."""
    return {
        "suite": suite.name,
        "experiment": planned.experiment.name,
        "kind": planned.experiment.kind,
        "config": {},
        "corpus_sha256": planned.corpus_sha256,
        "variant": variant_identity(variant),
        "harness": harness,
        "device": device,
        "versions": {k: library_versions()[k] for k in ("torch", "python")},
    }


def _seed_cells(suite: str, planned: CheckedExperiment, key_inputs: dict[str, Any] | None, build: Build) -> list[Cell]:
    """The cells of one build (a model size at a grid point): one per seed (a tuned protocol:
    its rung 0)."""
    exp, spec, model = planned.experiment, build.spec, build.model
    protocol: Protocol | None = getattr(exp, "protocol", None)  # train experiments have one
    tuning = protocol.tuning if protocol is not None else None
    if tuning is not None:  # successive halving: rung 0 now, the rest as results come in
        spec = type(spec).model_validate({**spec.model_dump(), "budget": tuning.budget})
    battery = getattr(exp, "battery", None)
    cells = []
    for seed in tuning.seeds if tuning is not None else exp.seeds:
        coords = {
            "variant": build.variant,
            "model": _size_index(exp.models, build.model_index),
            "d_model": model.d_model,
            "n_layer": model.n_layer,
            "seed": seed,
            **build.point,
            **({"stage": "tune", "rung": 0} if tuning is not None else {}),
            **({"battery": battery} if battery else {}),
        }
        record = _protocol_record(exp, protocol)
        cell = Cell(suite, exp.name, exp.kind, build.variant, model, planned.data, spec, seed, coords, protocol=record)
        cells.append(rekey(cell, key_inputs=key_inputs) if key_inputs else cell)
    return cells


def _protocol_record(exp: object, protocol: Protocol | None) -> dict[str, Any] | None:
    """The protocol stored with each result; with the grid's search windows, where it has any
    (the report reads which bound a search stopped at from them)."""
    if protocol is None:
        return None
    windows = exp.windows() if isinstance(exp, TrainExperiment) else {}
    record = protocol.model_dump()
    return {**record, "windows": {k: w.model_dump() for k, w in windows.items()}} if windows else record


def _size_index(models: list[ModelSpec], mi: int) -> int:
    """The ``model`` coordinate: the first model of the same size, layers aside, so a hybrid
    pairs with the plain variants of its size in every comparison."""
    size = models[mi].model_dump(exclude={"layers"})
    return next(i for i, m in enumerate(models) if m.model_dump(exclude={"layers"}) == size)


def rekey(cell: Cell, **changes: Any) -> Cell:
    """``cell`` with ``changes`` (spec, seed, coords) applied and its key computed again from
    its config; a cell planned without keys (``validate``) stays unkeyed."""
    cell = Cell(**{**cell.__dict__, **changes})
    if not cell.key_inputs:
        return cell
    inputs = {**cell.key_inputs, "config": cell.config_dict()}
    return Cell(**{**cell.__dict__, "key": content_key(inputs), "key_inputs": inputs})


# What "the same model" means when a cell reads the checkpoints of another experiment's cells.
SAME_MODEL = ("d_model", "n_layer", "n_head", "mlp_ratio", "dropout", "bias", "mlp")


def trained_cells_for(cell: Cell, source: str, cells: list[Cell]) -> list[Cell]:
    """The cells of experiment ``source`` with ``cell``'s variant, seed and model size (every
    grid point of them): what an lm_eval or finetune cell evaluates or tunes."""
    dims = tuple(getattr(cell.model, k) for k in SAME_MODEL)
    return [
        t
        for t in cells
        if t.experiment == source
        and t.variant == cell.variant
        and t.seed == cell.seed
        and tuple(getattr(t.model, k) for k in SAME_MODEL) == dims
    ]


def no_trained_cell_text(cell: Cell, source: str) -> str:
    """Why ``cell`` (of an lm_eval or finetune experiment) reads nothing: ``source`` trains no
    cell of its variant, model size and seed; and how to fix it."""
    return (
        f"experiment {source!r} has no trained cell of variant {cell.variant!r}, model d_model "
        f"{cell.model.d_model} x {cell.model.n_layer} layers x {cell.model.n_head} heads, seed "
        f"{cell.seed}; give this {cell.kind} experiment the same variants, models and seeds "
        "(e.g. through the suite's defaults)"
    )
