"""A loaded suite, checked once against the installed plugins before it is planned: every
variant, hybrid, baseline, option, data source and model size it names. Every problem is
found, each at its file and line, and all are reported together in one SuiteError (load_suite
checked the schema). What passes is a ``CheckedSuite``: each experiment's resolved data and,
per variant it runs, every model it builds at every grid point; plan/cells.py expands only
that, and checks nothing itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.data.files import check_data_files
from attnbench.data.spec import BYTE_VOCAB, DataSpec
from attnbench.data.vocab import task_seq_len, vocab_size_for
from attnbench.errors import DataError, UnknownVariantError, quoted, shortened
from attnbench.plan.base import LayerPattern, ModelSpec, option_key, variant_point
from attnbench.plan.protocol import Protocol
from attnbench.plan.size_check import ModelSize, check_model_sizes, matched_config
from attnbench.plan.specs import AnyExperiment
from attnbench.plan.suite import Suite, problem_at, suite_problems
from attnbench.registry.hybrid import Part, is_hybrid_name, make_part
from attnbench.registry.loader import Registry, unknown_variant_message

Loc = tuple[Any, ...]


# -- what a check hands to expansion ----------------------------------------------------


@dataclass(frozen=True)
class Build:
    """One model a variant trains: a model size of its experiment at one grid point."""

    experiment: str
    kind: str
    variant: str
    model_index: int  # into the experiment's ``models``
    point: dict[str, Any]  # the grid point, as it applies to this variant
    spec: BaseModel  # the experiment kind's mapping with the point's train settings applied
    model: ModelConfig  # sized, the variant's options set, the MLP width matched


@dataclass(frozen=True)
class CheckedRun:
    """A variant an experiment runs (registered, or a hybrid of one model) and its builds."""

    name: str
    variant: Variant
    builds: tuple[Build, ...]  # model-major, then grid point: the order cells are planned in


@dataclass(frozen=True)
class CheckedExperiment:
    experiment: AnyExperiment
    data: DataSpec | None  # paths made absolute; None for kinds without data (speed, lm_eval)
    corpus_sha256: str  # "" where the check was not asked to load the data
    runs: tuple[CheckedRun, ...]  # only the variants ``--variants`` keeps


@dataclass(frozen=True)
class CheckedSuite:
    suite: Suite
    experiments: tuple[CheckedExperiment, ...]
    sizes: tuple[ModelSize, ...]  # the distinct models, where the check was asked for sizes

    def builds(self) -> list[Build]:
        return [b for e in self.experiments for r in e.runs for b in r.builds]


def check_suite(
    suite: Suite,
    registry: Registry,
    *,
    only_variants: list[str] | None = None,
    corpus_hash: Callable[[DataSpec], str] | None = None,
    build: bool | None = None,
) -> CheckedSuite:
    """``suite`` checked whole against ``registry``: one SuiteError listing every problem, each
    at its file and line; then UnknownVariantError where ``only_variants`` (``--variants``)
    names a variant the suite does not run. With ``corpus_hash`` each experiment's data is
    loaded too (``run``'s keys need it), and data that cannot load is a problem of its
    experiment. With ``build`` not None, every distinct model is held against its variant's
    declared constraints and, when ``build``, built once (ModelSizeError names every refusal)."""
    checker = _Checker(suite, registry, corpus_hash)
    experiments = [checker.experiment(ei) for ei in range(len(suite.experiments))]
    if checker.problems:
        raise suite_problems(checker.problems)
    if only_variants:
        _check_only_variants(suite, registry, experiments, only_variants)
        experiments = [replace(e, runs=tuple(r for r in e.runs if r.name in only_variants)) for e in experiments]
    checked = CheckedSuite(suite, tuple(experiments), ())
    if build is None:
        return checked
    return replace(checked, sizes=tuple(check_model_sizes(checked.builds(), registry, build=build)))


def _check_only_variants(
    suite: Suite, registry: Registry, experiments: list[CheckedExperiment], only_variants: list[str]
) -> None:
    """Every name ``--variants`` gives is one the (checked) suite runs."""
    runs = list(dict.fromkeys(r.name for e in experiments for r in e.runs))
    for name in only_variants:
        if name not in registry.variants and name not in runs and not is_hybrid_name(name):
            raise UnknownVariantError(unknown_variant_message(name, registry.names()))
    missing = [n for n in only_variants if n not in runs]
    if missing:
        raise UnknownVariantError(
            f"--variants names {shortened(', '.join(missing))}, which suite {quoted(suite.name)} does "
            f"not run; it runs: {', '.join(runs)}. Name some of those."
        )


# -- resolving one experiment's settings --------------------------------------------------


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


# -- the walk ------------------------------------------------------------------------------


class _Checker:
    """Walks a suite's experiments, noting each problem once, in the order found, and
    resolving what the sound parts build."""

    def __init__(self, suite: Suite, registry: Registry, corpus_hash: Callable[[DataSpec], str] | None) -> None:
        self.suite, self.registry, self.corpus_hash = suite, registry, corpus_hash
        self.problems: list[str] = []

    def add(self, loc: Loc, message: str) -> None:
        line = problem_at(self.suite, loc, message)
        if line not in self.problems:
            self.problems.append(line)

    def experiment(self, ei: int) -> CheckedExperiment:
        exp = self.suite.experiments[ei]
        names = run_names(exp, self.registry)
        known = self.variant_names(ei, names)
        protocol: Protocol | None = getattr(exp, "protocol", None)  # train experiments have one
        if protocol is not None:
            self.baselines(ei, protocol, names)
        self.option_targets(ei, names)
        data, vocab, corpus = self.data(ei)
        plain = [mi for mi, m in enumerate(exp.models) if m.layers is None]
        runs = [(name, self.registry.get(name), plain) for name in known]
        runs += [(h.name, h, [mi]) for mi, h in self.hybrids(ei).items()]
        checked = [CheckedRun(name, v, self.variant(ei, name, v, indices, vocab)) for name, v, indices in runs]
        return CheckedExperiment(exp, data, corpus, tuple(checked))

    def variant_names(self, ei: int, names: list[str]) -> list[str]:
        """The names of ``names`` that are variants (registered, or hybrids by their pattern name)."""
        known = []
        for vi, name in enumerate(names):
            try:
                self.registry.get(name)
                known.append(name)
            except UnknownVariantError as exc:
                self.add(("experiments", ei, "variants", vi), str(exc))
        return known

    def baselines(self, ei: int, protocol: Protocol, names: list[str]) -> None:
        """Every variant the protocol compares with is one the experiment runs."""
        for bi, baseline in enumerate(protocol.compared_with()):
            if baseline not in names:
                where = ("baselines", bi) if protocol.baselines else ("baseline",)
                self.add(("experiments", ei, "protocol", *where), unknown_variant_message(baseline, names))

    def option_targets(self, ei: int, names: list[str]) -> None:
        """Options (given or swept) only for variants the experiment runs."""
        exp = self.suite.experiments[ei]
        for name in exp.variant_options:
            if name not in names:
                self.add(
                    ("experiments", ei, "variant_options", name),
                    f"options given for {quoted(name)}, which this experiment does not run",
                )
        for key in getattr(exp, "grid", {}):
            opt = option_key(key)
            if opt is not None and opt[0] not in names:
                self.add(
                    ("experiments", ei, "grid", key),
                    f"grid key {quoted(key)} sweeps an option of {quoted(opt[0])}, which this experiment "
                    f"does not run; it runs: {', '.join(names)}",
                )

    def data(self, ei: int) -> tuple[DataSpec | None, int, str]:
        """The experiment's data, its vocabulary and (with ``corpus_hash``) its contents' hash,
        once its files and task are checked; bytes' vocabulary where they are not, so sizes still are."""
        exp = self.suite.experiments[ei]
        data, seq_len = data_of(self.suite, exp), getattr(exp.spec(), "seq_len", None)
        if data is None:
            return None, BYTE_VOCAB, ""
        try:
            check_data_files(data, seq_len)
            vocab = vocab_size_for(data, self.registry)
            need = task_seq_len(data, self.registry) if data.source == "task" else seq_len
            if seq_len is not None and seq_len != need:
                raise DataError(f"task {data.task!r} makes sequences of {need} tokens; set train.seq_len: {need}")
            corpus = self.corpus_hash(data) if self.corpus_hash is not None else ""
        except (DataError, UnknownVariantError) as exc:
            self.add(("experiments", ei, "data"), str(exc))
            return data, BYTE_VOCAB, ""
        return data, vocab, corpus

    def hybrids(self, ei: int) -> dict[int, Variant]:
        """The hybrid of each model that lists ``layers`` and whose layers are all sound."""
        out = {}
        for mi, mspec in enumerate(self.suite.experiments[ei].models):
            entries = mspec.layer_entries()
            if entries is None:
                continue
            where = ("experiments", ei, "models", mi, "layers")
            at = where + (("pattern",) if isinstance(mspec.layers, LayerPattern) else ())
            if not all([self.layer(at + (li,), name, options) for li, (name, options) in enumerate(entries)]):
                continue
            try:
                out[mi] = self.registry.compose(hybrid_parts(self.registry, entries))
            except UnknownVariantError as exc:
                self.add(where, str(exc))
        return out

    def layer(self, at: Loc, name: str, options: dict[str, Any]) -> bool:
        """Whether one layer of a hybrid is a registered variant with options it takes."""
        if name not in self.registry.variants:
            self.add(at, unknown_variant_message(name, self.registry.names()))
            return False
        try:
            make_part(self.registry.get(name), options, f"layer {at[-1]} ({name})")
        except UnknownVariantError as exc:
            self.add(at, str(exc))
            return False
        return True

    def variant(self, ei: int, name: str, variant: Variant, model_indices: list[int], vocab: int) -> tuple[Build, ...]:
        """The variant's options, and every model size at every grid point it trains: the builds
        of those that are sound, model by model."""
        exp = self.suite.experiments[ei]
        try:
            variant.make_options(exp.variant_options.get(name))
        except ValueError as exc:
            self.add(("experiments", ei, "variant_options", name), str(exc))
            return ()
        builds: dict[tuple[int, int], Build] = {}
        for pi, point in enumerate(variant_points(exp, name)):
            try:
                options = variant.make_options(option_values(exp, name, point))
            except ValueError as exc:
                swept = next((k for k in point if option_key(k) is not None), None)
                self.add(("experiments", ei, *(("grid", swept) if swept else ("variant_options", name))), str(exc))
                continue
            spec = spec_at(exp, point)
            for mi in model_indices:
                model = self.size(ei, mi, name, variant, spec, options, vocab)
                if model is not None:
                    builds[model_indices.index(mi), pi] = Build(exp.name, exp.kind, name, mi, point, spec, model)
        return tuple(builds[at] for at in sorted(builds))

    def size(
        self, ei: int, mi: int, name: str, variant: Variant, spec: BaseModel, options: Any, vocab: int
    ) -> ModelConfig | None:
        """One model size of one variant at one grid point, as the settings ask (None where it
        cannot be built so)."""
        exp = self.suite.experiments[ei]
        mspec, at = exp.models[mi], ("experiments", ei, "models", mi)
        if model_kind(spec) == "own" and variant.build_model is None:
            self.add(
                ("experiments", ei, exp.kind, "model_kind"),
                f"variant {name!r} has no model of its own; use model_kind: backbone",
            )
        elif model_kind(spec) == "own":
            self.backbone_only(at, name, mspec.positions, mspec.mlp)
        try:
            model = model_config(mspec, exp.context(spec), options, vocab)
        except ValueError as exc:
            self.add(at, str(exc))
            return None
        period = len(getattr(variant, "parts", ())) or 1
        built = model if mspec.match_params is None else self.matched(ei, mi, variant, model, spec)
        if model.n_layer % period:
            self.add(
                (*at, "n_layer"),
                f"hybrid {name!r} repeats a pattern of {period} layers, and n_layer "
                f"{model.n_layer} is not a multiple of {period}; change n_layer",
            )
        if model.context < exp.context(spec):
            self.add(
                (*at, "context"),
                f"context {model.context} is shorter than the {exp.kind} experiment needs ({exp.context(spec)})",
            )
        return built

    def backbone_only(self, at: Loc, name: str, positions: str, mlp: bool) -> None:
        """No model setting that only the shared backbone honours on a variant's own model."""
        for setting, value, default in (("positions", positions, "learned"), ("mlp", mlp, True)):
            if value != default:
                self.add(
                    (*at, setting),
                    f"{setting}: {str(value).lower()} applies to the shared backbone, and variant {name!r} runs "
                    f"its own model (model_kind: own), which keeps its own; remove '{setting}' or use "
                    "model_kind: backbone",
                )

    def matched(self, ei: int, mi: int, variant: Variant, model: ModelConfig, spec: BaseModel) -> ModelConfig | None:
        """``model`` with the MLP width that brings ``variant`` to the parameters of the model's
        ``match_params`` (None where none does)."""
        exp = self.suite.experiments[ei]
        mspec, where = exp.models[mi], ("experiments", ei, "models", mi, "match_params")
        if model_kind(spec) != "backbone":
            self.add(
                where,
                "match_params sets the shared backbone's MLP width; use model_kind: backbone or remove match_params",
            )
            return None
        try:
            reference = self.registry.get(str(mspec.match_params))
            options = reference.make_options(exp.variant_options.get(str(mspec.match_params)))
            return matched_config(variant, model, reference, options, mspec.params_within)
        except (UnknownVariantError, ValueError) as exc:
            self.add(where, str(exc))
            return None
