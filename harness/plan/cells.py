"""Suite -> cells (variant x model size x data x budget x seed x grid point), each with
a content key: a cell already stored under its key is skipped, and a code change of the
variant or of the harness's compute modules gives a new key."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.data.files import check_data_files
from attnbench.data.spec import BYTE_VOCAB, DataSpec
from attnbench.data.vocab import task_seq_len, vocab_size_for
from attnbench.errors import DataError, UnknownVariantError, quoted, shortened
from attnbench.plan.base import LayerPattern, ModelSpec, Protocol, SpecT, option_key, spec_as, variant_point
from attnbench.plan.sizes import matched_config
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite, suite_error_at
from attnbench.registry.hybrid import is_hybrid_name, make_part
from attnbench.registry.identity import variant_identity
from attnbench.registry.loader import Registry, unknown_variant_message
from attnbench.store.provenance import content_key, library_versions


def _data_vocab(suite: Suite, ei: int, data: DataSpec | None, registry: Registry) -> int:
    """Vocabulary of an experiment's data; for tasks also checks seq_len matches."""
    if data is None:
        return BYTE_VOCAB
    try:
        check_data_files(data, getattr(suite.experiments[ei].spec(), "seq_len", None))
        vocab = vocab_size_for(data, registry)
        if data.source == "task":
            exp = suite.experiments[ei]
            need = task_seq_len(data, registry)
            if getattr(exp.spec(), "seq_len", need) != need:
                raise DataError(f"task {data.task!r} makes sequences of {need} tokens; set train.seq_len: {need}")
    except (DataError, UnknownVariantError) as exc:
        raise suite_error_at(suite, ("experiments", ei, "data"), str(exc)) from None
    return vocab


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


def _model_config(spec: ModelSpec, context: int, options: Any, vocab: int) -> ModelConfig:
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


def expand(
    suite: Suite,
    registry: Registry,
    *,
    device: str = "",
    only_variants: list[str] | None = None,
    corpus_hash: Callable[[DataSpec], str] | None = None,
    kind_code: Callable[[str], str] | None = None,
) -> list[Cell]:
    """All cells of a suite, validated against the registry. Keys are computed when
    ``corpus_hash`` (it loads the data) and ``kind_code`` (the hash of the code a kind
    runs) are given; ``validate`` passes neither. Kinds link their cells afterwards
    (``experiments.registry.expand_suite`` does both)."""
    if only_variants:
        hybrids = [h.name for ei in range(len(suite.experiments)) for h in _hybrids(suite, ei, registry).values()]
        for name in only_variants:
            if name not in registry.variants and name not in hybrids and not is_hybrid_name(name):
                raise UnknownVariantError(unknown_variant_message(name, registry.names()))
        runs = list(
            dict.fromkeys(
                [n for e in suite.experiments for n in (registry.names() if e.variants == "all" else e.variants)]
                + hybrids
            )
        )
        missing = [n for n in only_variants if n not in runs]
        if missing:
            raise UnknownVariantError(
                f"--variants names {shortened(', '.join(missing))}, which suite {quoted(suite.name)} does "
                f"not run; it runs: {', '.join(runs)}. Name some of those."
            )
    base = suite.path.parent if suite.path else Path.cwd()
    cells: list[Cell] = []
    for ei, exp in enumerate(suite.experiments):
        names = registry.names() if exp.variants == "all" else exp.variants
        for vi, name in enumerate(names):
            try:
                registry.get(name)  # a registered variant, or a hybrid by its pattern name
            except UnknownVariantError as exc:
                raise suite_error_at(suite, ("experiments", ei, "variants", vi), str(exc)) from None
        protocol: Protocol | None = getattr(exp, "protocol", None)  # train experiments have one
        if protocol is not None:
            _check_baselines(suite, ei, protocol, names)
        for name in exp.variant_options:
            if name not in names:
                raise suite_error_at(
                    suite,
                    ("experiments", ei, "variant_options", name),
                    f"options given for {quoted(name)}, which this experiment does not run",
                )
        for key in getattr(exp, "grid", {}):
            opt = option_key(key)
            if opt is not None and opt[0] not in names:
                raise suite_error_at(
                    suite,
                    ("experiments", ei, "grid", key),
                    f"grid key {quoted(key)} sweeps an option of {quoted(opt[0])}, which this experiment "
                    f"does not run; it runs: {', '.join(names)}",
                )
        exp_data: DataSpec | None = getattr(exp, "data", None)  # speed and lm_eval experiments have none
        data = exp_data.resolved(base) if exp_data else None
        vocab = _data_vocab(suite, ei, data, registry)
        try:
            data_hash = corpus_hash(data) if corpus_hash and data else ""
        except DataError as exc:
            raise suite_error_at(suite, ("experiments", ei, "data"), str(exc)) from None
        plain = [mi for mi, m in enumerate(exp.models) if m.layers is None]
        runs = [(name, registry.get(name), plain) for name in names]
        runs += [(h.name, h, [mi]) for mi, h in _hybrids(suite, ei, registry).items()]
        for name, variant, model_indices in runs:
            if only_variants and name not in only_variants or not model_indices:
                continue
            try:
                variant.make_options(exp.variant_options.get(name))
            except ValueError as exc:
                raise suite_error_at(suite, ("experiments", ei, "variant_options", name), str(exc)) from None
            points = list(
                {
                    json.dumps(p, sort_keys=True, default=str): p
                    for p in (variant_point(q, name) for q in exp.points())
                }.values()
            )
            for mi in model_indices:
                mspec = exp.models[mi]
                for point in points:
                    swept = {opt[1]: v for k, v in point.items() if (opt := option_key(k)) is not None}
                    try:
                        options = variant.make_options({**exp.variant_options.get(name, {}), **swept})
                    except ValueError as exc:
                        where = next(k for k in point if option_key(k) is not None)
                        raise suite_error_at(suite, ("experiments", ei, "grid", where), str(exc)) from None
                    settings = {k: v for k, v in point.items() if option_key(k) is None}
                    base_spec = exp.spec()
                    spec = (
                        type(base_spec).model_validate({**base_spec.model_dump(), **settings})
                        if settings
                        else base_spec
                    )
                    if getattr(spec, "model_kind", "backbone") == "own" and variant.build_model is None:
                        raise suite_error_at(
                            suite,
                            ("experiments", ei, exp.kind, "model_kind"),
                            f"variant {name!r} has no model of its own; use model_kind: backbone",
                        )
                    if getattr(spec, "model_kind", "backbone") == "own":
                        _backbone_only(suite, ei, mi, name, mspec)
                    try:
                        model = _model_config(mspec, exp.context(spec), options, vocab)
                    except ValueError as exc:
                        raise suite_error_at(suite, ("experiments", ei, "models", mi), str(exc)) from None
                    if mspec.match_params is not None:
                        model = _matched(suite, ei, mi, registry, variant, model, spec)
                    period = len(getattr(variant, "parts", ())) or 1
                    if model.n_layer % period:
                        raise suite_error_at(
                            suite,
                            ("experiments", ei, "models", mi, "n_layer"),
                            f"hybrid {name!r} repeats a pattern of {period} layers, and n_layer "
                            f"{model.n_layer} is not a multiple of {period}; change n_layer",
                        )
                    if model.context < exp.context(spec):
                        raise suite_error_at(
                            suite,
                            ("experiments", ei, "models", mi, "context"),
                            f"context {model.context} is shorter than the {exp.kind} "
                            f"experiment needs ({exp.context(spec)})",
                        )
                    tuning = protocol.tuning if protocol is not None else None
                    if tuning is not None:  # successive halving: rung 0 now, the rest as results come in
                        spec = type(spec).model_validate({**spec.model_dump(), "budget": tuning.budget})
                    for seed in tuning.seeds if tuning is not None else exp.seeds:
                        coords = {
                            "variant": name,
                            "model": _size_index(exp.models, mi),
                            "d_model": model.d_model,
                            "n_layer": model.n_layer,
                            "seed": seed,
                            **point,
                            **({"stage": "tune", "rung": 0} if tuning is not None else {}),
                            **({"battery": battery} if (battery := getattr(exp, "battery", None)) else {}),
                        }
                        cell = Cell(
                            suite.name,
                            exp.name,
                            exp.kind,
                            name,
                            model,
                            data,
                            spec,
                            seed,
                            coords,
                            protocol=_protocol_record(exp, protocol),
                        )
                        if corpus_hash and kind_code:
                            inputs = {
                                "suite": suite.name,
                                "experiment": exp.name,
                                "kind": exp.kind,
                                "config": {},
                                "corpus_sha256": data_hash,
                                "variant": variant_identity(variant),
                                "harness": kind_code(exp.kind),
                                "device": device,
                                "versions": {k: library_versions()[k] for k in ("torch", "python")},
                            }
                            cell = rekey(Cell(**{**cell.__dict__, "key_inputs": inputs}))
                        cells.append(cell)
    return cells


def _protocol_record(exp: object, protocol: Protocol | None) -> dict[str, Any] | None:
    """The protocol stored with each result; with the grid's search windows, where it has any
    (the report reads which bound a search stopped at from them)."""
    if protocol is None:
        return None
    windows = exp.windows() if isinstance(exp, TrainExperiment) else {}
    record = protocol.model_dump()
    return {**record, "windows": {k: w.model_dump() for k, w in windows.items()}} if windows else record


def _hybrids(suite: Suite, ei: int, registry: Registry) -> dict[int, Variant]:
    """The hybrid of each model of experiment ``ei`` that lists ``layers``, by model index."""
    out = {}
    for mi, mspec in enumerate(suite.experiments[ei].models):
        entries = mspec.layer_entries()
        if entries is None:
            continue
        where = ("experiments", ei, "models", mi, "layers")
        at = where + (("pattern",) if isinstance(mspec.layers, LayerPattern) else ())
        parts = []
        for li, (name, options) in enumerate(entries):
            if name not in registry.variants:
                raise suite_error_at(suite, at + (li,), unknown_variant_message(name, registry.names()))
            try:
                parts.append(make_part(registry.get(name), options, f"layer {li} ({name})"))
            except UnknownVariantError as exc:
                raise suite_error_at(suite, at + (li,), str(exc)) from None
        try:
            out[mi] = registry.compose(parts)
        except UnknownVariantError as exc:
            raise suite_error_at(suite, where, str(exc)) from None
    return out


def _check_baselines(suite: Suite, ei: int, protocol: Protocol, names: list[str]) -> None:
    """Every variant the protocol compares with is one experiment ``ei`` runs."""
    for bi, baseline in enumerate(protocol.compared_with()):
        if baseline not in names:
            where = ("baselines", bi) if protocol.baselines else ("baseline",)
            raise suite_error_at(
                suite, ("experiments", ei, "protocol", *where), unknown_variant_message(baseline, names)
            )


def _backbone_only(suite: Suite, ei: int, mi: int, variant: str, mspec: ModelSpec) -> None:
    """Refuse model settings that only the shared backbone honours on a variant's own model."""
    for setting, value, default in (("positions", mspec.positions, "learned"), ("mlp", mspec.mlp, True)):
        if value != default:
            raise suite_error_at(
                suite,
                ("experiments", ei, "models", mi, setting),
                f"{setting}: {str(value).lower()} applies to the shared backbone, and variant {variant!r} runs its own "
                f"model (model_kind: own), which keeps its own; remove '{setting}' or use model_kind: backbone",
            )


def _matched(
    suite: Suite, ei: int, mi: int, registry: Registry, variant: Variant, model: ModelConfig, spec: BaseModel
) -> ModelConfig:
    """``model`` with the MLP width that matches ``variant``'s parameters to ``match_params``."""
    exp, where = suite.experiments[ei], ("experiments", ei, "models", mi, "match_params")
    mspec = exp.models[mi]
    name = mspec.match_params
    if name is None:  # the caller matches only models that name a variant
        return model
    if getattr(spec, "model_kind", "backbone") != "backbone":
        raise suite_error_at(
            suite,
            where,
            "match_params sets the shared backbone's MLP width; use model_kind: backbone or remove match_params",
        )
    try:
        reference = registry.get(name)
        options = reference.make_options(exp.variant_options.get(name))
        return matched_config(variant, model, reference, options, mspec.params_within)
    except (UnknownVariantError, ValueError) as exc:
        raise suite_error_at(suite, where, str(exc)) from None


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
