"""Suite -> cells (variant x model size x data x budget x seed x grid point), each with
a content key: a cell already stored under its key is skipped, and a code change of the
variant or of the harness's compute modules gives a new key. ``expand`` plans a suite that
plan/validation.py has checked; it checks nothing itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.data.spec import BYTE_VOCAB, DataSpec
from attnbench.data.vocab import vocab_size_for
from attnbench.plan.base import ModelSpec, Protocol, SpecT, option_key, spec_as, variant_point
from attnbench.plan.sizes import matched_config
from attnbench.plan.specs import AnyExperiment, TrainExperiment
from attnbench.plan.suite import Suite
from attnbench.registry.hybrid import Part, make_part
from attnbench.registry.identity import variant_identity
from attnbench.registry.loader import Registry
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


def model_config(spec: ModelSpec, context: int, options: Any, vocab: int) -> ModelConfig:
    """The model of size ``spec`` (``context`` where it sets none); ValueError for a bad size."""
    return ModelConfig(
        vocab_size=vocab,
        d_model=spec.d_model,
        n_layer=spec.n_layer,
        n_head=spec.n_head,
        context=spec.context or context,
        mlp_ratio=spec.mlp_ratio,
        dropout=spec.dropout,
        bias=spec.bias,
        options=options,
        activation=spec.activation,
        positions=spec.positions,
        mlp=spec.mlp,
    )


def run_names(exp: AnyExperiment, registry: Registry) -> list[str]:
    """The variants an experiment lists (``all``: every registered one)."""
    return registry.names() if exp.variants == "all" else list(exp.variants)


def hybrid_parts(registry: Registry, entries: list[tuple[str, dict[str, Any]]]) -> list[Part]:
    """One part per layer of a model's ``layers`` (UnknownVariantError for a bad layer)."""
    return [
        make_part(registry.get(name), options, f"layer {li} ({name})") for li, (name, options) in enumerate(entries)
    ]


def hybrids_of(exp: AnyExperiment, registry: Registry) -> dict[int, Variant]:
    """The hybrid of each model of ``exp`` that lists ``layers``, by model index."""
    entries = {mi: m.layer_entries() for mi, m in enumerate(exp.models)}
    return {mi: registry.compose(hybrid_parts(registry, e)) for mi, e in entries.items() if e is not None}


def variant_runs(exp: AnyExperiment, registry: Registry) -> list[tuple[str, Variant, list[int]]]:
    """(name, variant, model indices) of each variant ``exp`` trains: the listed ones on every
    model without ``layers``, each hybrid on the model that lists it."""
    plain = [mi for mi, m in enumerate(exp.models) if m.layers is None]
    runs = [(name, registry.get(name), plain) for name in run_names(exp, registry)]
    return runs + [(h.name, h, [mi]) for mi, h in hybrids_of(exp, registry).items()]


def variant_points(exp: AnyExperiment, name: str) -> list[dict[str, Any]]:
    """The grid points that differ for variant ``name`` (train settings and its own options)."""
    points = (variant_point(q, name) for q in exp.points())
    return list({json.dumps(p, sort_keys=True, default=str): p for p in points}.values())


def option_values(exp: AnyExperiment, name: str, point: dict[str, Any]) -> dict[str, Any]:
    """``name``'s options at ``point``: the experiment's, with the point's swept ones over them."""
    swept = {opt[1]: v for k, v in point.items() if (opt := option_key(k)) is not None}
    return {**exp.variant_options.get(name, {}), **swept}


def spec_at(exp: AnyExperiment, point: dict[str, Any]) -> BaseModel:
    """The experiment's settings with the train settings of ``point`` applied."""
    settings = {k: v for k, v in point.items() if option_key(k) is None}
    base = exp.spec()
    return type(base).model_validate({**base.model_dump(), **settings}) if settings else base


def model_kind(spec: BaseModel) -> str:
    """``own`` (the variant's own model) or ``backbone`` (the shared one; kinds without the setting)."""
    return getattr(spec, "model_kind", "backbone")


def data_of(suite: Suite, exp: AnyExperiment) -> DataSpec | None:
    """An experiment's data, paths resolved against the suite's folder (speed, lm_eval: none)."""
    data: DataSpec | None = getattr(exp, "data", None)
    return data.resolved(suite.path.parent if suite.path else Path.cwd()) if data else None


def matched(exp: AnyExperiment, mi: int, registry: Registry, variant: Variant, model: ModelConfig) -> ModelConfig:
    """``model`` with the MLP width that matches ``variant``'s parameters to ``match_params``
    (ValueError where no width does)."""
    mspec = exp.models[mi]
    if mspec.match_params is None:
        return model
    reference = registry.get(mspec.match_params)
    options = reference.make_options(exp.variant_options.get(mspec.match_params))
    return matched_config(variant, model, reference, options, mspec.params_within)


@dataclass(frozen=True)
class _Planned:
    """One variant of one experiment, as its cells are planned."""

    suite: Suite
    exp: AnyExperiment
    name: str
    variant: Variant
    data: DataSpec | None
    key_inputs: dict[str, Any] | None  # None: cells without keys (``validate``)


def expand(
    suite: Suite,
    registry: Registry,
    *,
    device: str = "",
    only_variants: list[str] | None = None,
    corpus_hash: Callable[[DataSpec], str] | None = None,
    kind_code: Callable[[str], str] | None = None,
) -> list[Cell]:
    """All cells of a suite that plan/validation.py ``check_suite`` passed. Keys are computed
    when ``corpus_hash`` (it loads the data) and ``kind_code`` (the hash of the code a kind
    runs) are given; ``validate`` passes neither. Kinds link their cells afterwards
    (``experiments.registry.expand_suite`` checks, expands and links)."""
    cells: list[Cell] = []
    for exp in suite.experiments:
        data = data_of(suite, exp)
        vocab = vocab_size_for(data, registry) if data else BYTE_VOCAB
        data_hash = corpus_hash(data) if corpus_hash and data else ""
        for name, variant, model_indices in variant_runs(exp, registry):
            if only_variants and name not in only_variants:
                continue
            keys = None
            if corpus_hash and kind_code:
                keys = _key_inputs(suite, exp, variant, data_hash, kind_code(exp.kind), device)
            run, points = _Planned(suite, exp, name, variant, data, keys), variant_points(exp, name)
            for mi in model_indices:
                for point in points:
                    spec = spec_at(exp, point)
                    options = variant.make_options(option_values(exp, name, point))
                    model = model_config(exp.models[mi], exp.context(spec), options, vocab)
                    cells += _seed_cells(run, mi, matched(exp, mi, registry, variant, model), spec, point)
    return cells


def _key_inputs(
    suite: Suite, exp: AnyExperiment, variant: Variant, data_hash: str, harness: str, device: str
) -> dict[str, Any]:
    """What a cell's key hashes besides its config (``rekey`` adds that)."""
    return {
        "suite": suite.name,
        "experiment": exp.name,
        "kind": exp.kind,
        "config": {},
        "corpus_sha256": data_hash,
        "variant": variant_identity(variant),
        "harness": harness,
        "device": device,
        "versions": {k: library_versions()[k] for k in ("torch", "python")},
    }


def _seed_cells(run: _Planned, mi: int, model: ModelConfig, spec: BaseModel, point: dict[str, Any]) -> list[Cell]:
    """The cells of one model size and grid point: one per seed (a tuned protocol: its rung 0)."""
    exp = run.exp
    protocol: Protocol | None = getattr(exp, "protocol", None)  # train experiments have one
    tuning = protocol.tuning if protocol is not None else None
    if tuning is not None:  # successive halving: rung 0 now, the rest as results come in
        spec = type(spec).model_validate({**spec.model_dump(), "budget": tuning.budget})
    battery = getattr(exp, "battery", None)
    cells = []
    for seed in tuning.seeds if tuning is not None else exp.seeds:
        coords = {
            "variant": run.name,
            "model": _size_index(exp.models, mi),
            "d_model": model.d_model,
            "n_layer": model.n_layer,
            "seed": seed,
            **point,
            **({"stage": "tune", "rung": 0} if tuning is not None else {}),
            **({"battery": battery} if battery else {}),
        }
        cell = Cell(
            run.suite.name,
            exp.name,
            exp.kind,
            run.name,
            model,
            run.data,
            spec,
            seed,
            coords,
            protocol=_protocol_record(exp, protocol),
        )
        cells.append(rekey(cell, key_inputs=run.key_inputs) if run.key_inputs else cell)
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
