"""A loaded suite, checked once against the installed plugins before it is planned: every
variant, hybrid, baseline, option, data source and model size it names. Every problem is
found, each at its file and line, and all are reported together in one SuiteError (load_suite
checked the schema; plan/cells.py then expands the checked suite without checks of its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.data.files import check_data_files
from attnbench.data.spec import BYTE_VOCAB, DataSpec
from attnbench.data.vocab import task_seq_len, vocab_size_for
from attnbench.errors import DataError, UnknownVariantError, quoted, shortened
from attnbench.plan.base import LayerPattern, Protocol, option_key
from attnbench.plan.cells import (
    data_of,
    hybrid_parts,
    hybrids_of,
    matched,
    model_config,
    model_kind,
    option_values,
    run_names,
    spec_at,
    variant_points,
)
from attnbench.plan.suite import Suite, problem_at, suite_problems
from attnbench.registry.hybrid import is_hybrid_name, make_part
from attnbench.registry.loader import Registry, unknown_variant_message

Loc = tuple[Any, ...]


def check_suite(
    suite: Suite,
    registry: Registry,
    *,
    only_variants: list[str] | None = None,
    corpus_hash: Callable[[DataSpec], str] | None = None,
) -> None:
    """Raise one SuiteError listing every problem of ``suite`` against ``registry``, each at
    its file and line; then UnknownVariantError where ``only_variants`` (``--variants``) names
    a variant the suite does not run. With ``corpus_hash`` each experiment's data is loaded too
    (``run``'s keys need it), and data that cannot load is a problem of its experiment."""
    checker = _Checker(suite, registry, corpus_hash)
    for ei in range(len(suite.experiments)):
        checker.experiment(ei)
    if checker.problems:
        raise suite_problems(checker.problems)
    if only_variants:
        _check_only_variants(suite, registry, only_variants)


def _check_only_variants(suite: Suite, registry: Registry, only_variants: list[str]) -> None:
    """Every name ``--variants`` gives is one the (checked) suite runs."""
    hybrids = [h.name for exp in suite.experiments for h in hybrids_of(exp, registry).values()]
    for name in only_variants:
        if name not in registry.variants and name not in hybrids and not is_hybrid_name(name):
            raise UnknownVariantError(unknown_variant_message(name, registry.names()))
    runs = list(dict.fromkeys([n for exp in suite.experiments for n in run_names(exp, registry)] + hybrids))
    missing = [n for n in only_variants if n not in runs]
    if missing:
        raise UnknownVariantError(
            f"--variants names {shortened(', '.join(missing))}, which suite {quoted(suite.name)} does "
            f"not run; it runs: {', '.join(runs)}. Name some of those."
        )


class _Checker:
    """Walks a suite as ``expand`` will, noting each problem once, in the order found."""

    def __init__(self, suite: Suite, registry: Registry, corpus_hash: Callable[[DataSpec], str] | None) -> None:
        self.suite, self.registry, self.corpus_hash = suite, registry, corpus_hash
        self.problems: list[str] = []

    def add(self, loc: Loc, message: str) -> None:
        line = problem_at(self.suite, loc, message)
        if line not in self.problems:
            self.problems.append(line)

    def experiment(self, ei: int) -> None:
        exp = self.suite.experiments[ei]
        names = run_names(exp, self.registry)
        known = self.variant_names(ei, names)
        protocol: Protocol | None = getattr(exp, "protocol", None)  # train experiments have one
        if protocol is not None:
            self.baselines(ei, protocol, names)
        self.option_targets(ei, names)
        vocab = self.data(ei)
        plain = [mi for mi, m in enumerate(exp.models) if m.layers is None]
        runs = [(name, self.registry.get(name), plain) for name in known]
        runs += [(h.name, h, [mi]) for mi, h in self.hybrids(ei).items()]
        for name, variant, model_indices in runs:
            if model_indices:
                self.variant(ei, name, variant, model_indices, vocab)

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

    def data(self, ei: int) -> int:
        """The vocabulary of the experiment's data, once its files, its task and (with
        ``corpus_hash``) its contents are checked; bytes' where they are not, so sizes still are."""
        exp = self.suite.experiments[ei]
        data, seq_len = data_of(self.suite, exp), getattr(exp.spec(), "seq_len", None)
        if data is None:
            return BYTE_VOCAB
        try:
            check_data_files(data, seq_len)
            vocab = vocab_size_for(data, self.registry)
            need = task_seq_len(data, self.registry) if data.source == "task" else seq_len
            if seq_len is not None and seq_len != need:
                raise DataError(f"task {data.task!r} makes sequences of {need} tokens; set train.seq_len: {need}")
            if self.corpus_hash is not None:
                self.corpus_hash(data)
        except (DataError, UnknownVariantError) as exc:
            self.add(("experiments", ei, "data"), str(exc))
            return BYTE_VOCAB
        return vocab

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

    def variant(self, ei: int, name: str, variant: Variant, model_indices: list[int], vocab: int) -> None:
        """The variant's options, and every model size at every grid point it trains."""
        exp = self.suite.experiments[ei]
        try:
            variant.make_options(exp.variant_options.get(name))
        except ValueError as exc:
            self.add(("experiments", ei, "variant_options", name), str(exc))
            return
        for point in variant_points(exp, name):
            try:
                options = variant.make_options(option_values(exp, name, point))
            except ValueError as exc:
                swept = next((k for k in point if option_key(k) is not None), None)
                self.add(("experiments", ei, *(("grid", swept) if swept else ("variant_options", name))), str(exc))
                continue
            spec = spec_at(exp, point)
            for mi in model_indices:
                self.size(ei, mi, name, variant, spec, options, vocab)

    def size(self, ei: int, mi: int, name: str, variant: Variant, spec: BaseModel, options: Any, vocab: int) -> None:
        """One model size of one variant at one grid point: buildable as the settings ask."""
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
            return
        if mspec.match_params is not None:
            self.matched(ei, mi, variant, model, spec)
        period = len(getattr(variant, "parts", ())) or 1
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

    def matched(self, ei: int, mi: int, variant: Variant, model: ModelConfig, spec: BaseModel) -> None:
        """An MLP width brings ``variant`` to the parameters of the model's ``match_params``."""
        where = ("experiments", ei, "models", mi, "match_params")
        if model_kind(spec) != "backbone":
            self.add(
                where,
                "match_params sets the shared backbone's MLP width; use model_kind: backbone or remove match_params",
            )
            return
        try:
            matched(self.suite.experiments[ei], mi, self.registry, variant, model)
        except (UnknownVariantError, ValueError) as exc:
            self.add(where, str(exc))
