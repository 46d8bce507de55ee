"""Model sizes. Fair sizes: each variant's MLP width chosen so its parameter count is within a
tolerance of a reference variant's at the same model size (``models[].match_params``). Then
every distinct model a suite builds (variant x model kind x ``ModelConfig``), checked when the
suite is (plan/validation.py), before any cell is planned: against each variant's declared
constraints (``validate``, no torch), then built once, with no training (``validate``, unless
--no-build, and the start of ``run``). A refused size is a ``ModelSizeError`` naming every
refusal: variant, size and the reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.errors import ModelSizeError, quoted, shortened
from attnbench.plan.scaling_spec import MIN_SCALING_SIZES
from attnbench.registry.loader import Registry

# ModelConfig fields a size names only where they differ from ModelConfig's defaults
_WHEN_CHANGED = ("mlp_ratio", "mlp_hidden", "dropout", "bias", "activation", "positions", "mlp")

_COUNTS: dict[tuple[str, str], int] = {}


def count_params(variant: Variant, config: ModelConfig) -> int:
    """Parameters of the shared backbone with ``variant``'s mixers (built without memory on
    the meta device where the mixers allow it)."""
    key = (variant.name, repr(config))
    if key not in _COUNTS:
        import torch  # only a suite that matches parameter counts builds models while it is checked

        from attnbench.nn.backbone import Backbone

        try:
            with torch.device("meta"):
                model = Backbone(config, variant.build_mixer)
        except Exception:  # a mixer that computes at build time: build it for real
            model = Backbone(config, variant.build_mixer)
        _COUNTS[key] = sum(p.numel() for p in model.parameters())
    return _COUNTS[key]


def matched_config(
    variant: Variant, config: ModelConfig, reference: Variant, reference_options: Any, within: float
) -> ModelConfig:
    """``config`` with the MLP width that brings ``variant`` within ``within`` (relative) of the
    reference's parameter count; unchanged when it already is. Raises ValueError when no
    MLP width can (the mixers alone differ by more than the MLPs hold)."""
    target = count_params(reference, config.replace(options=reference_options))
    mine = count_params(variant, config)
    if abs(mine - target) <= within * target:
        return config
    per_unit = config.n_layer * (2 * config.d_model + (1 if config.bias else 0))  # params per MLP unit
    hidden = config.mlp_width + round((target - mine) / per_unit)
    if hidden < 1:
        raise ValueError(
            f"{variant.name!r} has {mine:,} parameters and {reference.name!r} {target:,}: no MLP "
            "width matches them; compare at a larger d_model or without match_params"
        )
    matched = config.replace(mlp_hidden=hidden)
    got = count_params(variant, matched)
    if abs(got - target) > within * target:
        raise ValueError(
            f"{variant.name!r} reaches {got:,} parameters at MLP width {hidden} against "
            f"{reference.name!r}'s {target:,}, outside {within:.0%}; raise params_within"
        )
    return matched


class Built(Protocol):
    """What builds a model: a checked suite's build (plan/validation.py), or a cell."""

    @property
    def experiment(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def model(self) -> ModelConfig: ...
    @property
    def spec(self) -> BaseModel: ...


@dataclass(frozen=True)
class ModelSize:
    """One model a suite builds, and the experiments whose cells build it.

    model_kind: "backbone" (the shared backbone around the variant's mixer) or "own" (the
    variant's own model).
    """

    variant: str
    model_kind: str
    config: ModelConfig
    experiments: tuple[str, ...]


def model_sizes(cells: Iterable[Built]) -> list[ModelSize]:
    """The distinct models ``cells`` build, in first-use order. One whose spec has no
    ``model_kind`` (lm_eval) builds none: it reads the checkpoints of train cells of the suite."""
    found: dict[tuple[str, str, str], ModelSize] = {}
    for cell in cells:
        kind = getattr(cell.spec, "model_kind", None)
        if kind is None:
            continue
        key = (cell.variant, kind, repr(cell.model))
        seen = found.get(key)
        experiments = seen.experiments if seen else ()
        if cell.experiment not in experiments:
            found[key] = ModelSize(cell.variant, kind, cell.model, (*experiments, cell.experiment))
    return list(found.values())


def _plain(options: Any) -> dict[str, Any]:
    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) and not isinstance(options, type) else {}


def size_text(variant: Variant, config: ModelConfig) -> str:
    """ "d_model 48, n_layer 2, n_head 16 (head_dim 3), context 64, vocab_size 256", then the
    fields and options that differ from their defaults."""
    c, default = config, ModelConfig()
    parts = [
        f"d_model {c.d_model}",
        f"n_layer {c.n_layer}",
        f"n_head {c.n_head} (head_dim {c.head_dim})",
        f"context {c.context}",
        f"vocab_size {c.vocab_size}",
    ]
    parts += [f"{name} {getattr(c, name)}" for name in _WHEN_CHANGED if getattr(c, name) != getattr(default, name)]
    try:
        defaults = _plain(variant.make_options(None))
    except ValueError:  # options without defaults: every one is the suite's
        defaults = {}
    changed = {k: v for k, v in _plain(c.options).items() if k not in defaults or defaults[k] != v}
    if changed:
        parts.append("options " + ", ".join(f"{k}={v!r}" for k, v in changed.items()))
    return ", ".join(parts)


def stated_constraints(sizes: Iterable[ModelSize], registry: Registry) -> list[str]:
    """One line per declared constraint of the variants ``sizes`` build ("name: rule (why)")."""
    names = dict.fromkeys(s.variant for s in sizes)
    return [f"{name}: {c.describe()}" for name in names for c in registry.get(name).constraints]


def _broken_constraints(variant: Variant, config: ModelConfig) -> str | None:
    broken = [why for c in variant.constraints if (why := c.broken_by(config)) is not None]
    return "; ".join(broken) or None


def _build_refusal(variant: Variant, size: ModelSize) -> str | None:
    """None when the builder makes ``size`` (on the meta device, else on the CPU for a builder
    that computes while it builds), else its error. The global RNG is left as it was."""
    import torch  # building a model: only here, so that validate --no-build needs no torch

    from attnbench.nn.backbone import Backbone

    def error_on(device: str) -> Exception | None:
        try:
            with torch.device(device):
                if size.model_kind == "own" and variant.build_model is not None:  # plan refuses own without one
                    variant.build_model(size.config)
                else:
                    Backbone(size.config, variant.build_mixer)
        except Exception as exc:  # a plugin's builder: its own error is the message
            return exc
        return None

    with torch.random.fork_rng(devices=[]):
        exc = error_on("meta")
        if exc is not None:  # a builder that computes while it builds fails on meta: build it for real
            exc = error_on("cpu")
    if exc is None:
        return None
    return f"its builder refused: {type(exc).__name__}: {shortened(' '.join(str(exc).split()))}"


def check_model_sizes(cells: Iterable[Built], registry: Registry, *, build: bool) -> list[ModelSize]:
    """The distinct models of ``cells``, each checked against its variant's declared
    constraints and, when ``build``, built once (no forward, no training). Raises
    ModelSizeError naming every refused size, not only the first."""
    sizes = model_sizes(cells)
    refused = []
    for size in sizes:
        variant = registry.get(size.variant)
        why = _broken_constraints(variant, size.config)
        if why is None and build:
            why = _build_refusal(variant, size)
        if why is not None:
            own = " (its own model)" if size.model_kind == "own" else ""
            refused.append(
                f"variant {quoted(size.variant)}{own} at {size_text(variant, size.config)}, "
                f"used by experiment(s) {', '.join(map(quoted, size.experiments))}: {why}"
            )
    if refused:
        raise ModelSizeError(
            f"{len(refused)} model size(s) refused before any cell runs:\n  - "
            + "\n  - ".join(refused)
            + "\nChange those experiments' models[] (d_model, n_head, ...) to sizes the variant "
            "supports, or leave the variant out of them."
        )
    if build:
        check_scaling_sizes(cells, registry)
    return sizes


def _param_count(variant: Variant, model_kind: str, config: ModelConfig) -> int | None:
    """Parameters of the model (built on the meta device: no memory, no RNG draw); None where
    the builder refuses it there (the build check above names such sizes)."""
    import torch

    from attnbench.nn.backbone import Backbone

    try:
        with torch.device("meta"):
            build = variant.build_model if model_kind == "own" else None
            model = build(config) if build is not None else Backbone(config, variant.build_mixer)
    except Exception:  # a plugin's builder: refused or computing while it builds; no count to compare
        return None
    return model.num_params()


def check_scaling_sizes(cells: Iterable[Built], registry: Registry) -> None:
    """Each scaling experiment's models, per variant, have at least MIN_SCALING_SIZES distinct
    parameter counts (models that differ only in n_head have one count: one size to the fit)."""
    groups: dict[tuple[str, str], dict[str, tuple[str, ModelConfig]]] = {}
    for c in cells:
        if c.kind == "scaling":
            kind = str(getattr(c.spec, "model_kind", "backbone"))
            groups.setdefault((c.experiment, c.variant), {})[repr(c.model)] = (kind, c.model)
    short = []
    for (exp, name), models in groups.items():
        variant = registry.get(name)
        counts = [_param_count(variant, kind, config) for kind, config in models.values()]
        distinct = sorted({n for n in counts if n is not None})
        if None not in counts and len(distinct) < MIN_SCALING_SIZES:
            short.append(
                f"experiment {quoted(exp)}, variant {quoted(name)}: {len(models)} models, "
                f"{len(distinct)} distinct parameter count(s) ({', '.join(f'{n:,}' for n in distinct)})"
            )
    if short:
        raise ModelSizeError(
            f"a scaling fit needs at least {MIN_SCALING_SIZES} sizes, and a size is a parameter count:\n  - "
            + "\n  - ".join(short)
            + "\nModels that differ only in n_head (or another setting that adds no parameter) are one size; "
            "vary d_model or n_layer so that the models span a decade of parameters."
        )
