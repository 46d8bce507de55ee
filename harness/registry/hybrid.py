"""Hybrid models: registered variants composed layer by layer, as a variant of their own.

A hybrid is a pattern of parts (a registered variant with its options) repeated to
``n_layer``: layer i is built, decoded and counted by part ``i mod len(parts)``. It is named
by its pattern ("gated_deltanet x3 + softmax"; options that differ from a part's defaults in
parentheses, ``gla(expand_k=0.5)``), and that name alone rebuilds it: every path that looks
a variant up by name (cells, checkpoints, exports, worker processes, ``attnbench check``)
gets the hybrid through ``Registry.get``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from attnbench.contract.config import ModelConfig
from attnbench.contract.constraints import ShapeConstraint
from attnbench.contract.variant import Variant
from attnbench.errors import UnknownVariantError

if TYPE_CHECKING:
    from torch import nn  # a hybrid is named and validated without torch

SEP = " + "  # between runs of layers in a hybrid's name
PART_ATTR = "attnbench_hybrid_part"  # set on each built mixer: the index of the part that built it
R = TypeVar("R")
_RUN_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_\-]*)(?:\((?P<opts>.*)\))?(?: x(?P<n>[1-9][0-9]*))?$")


def _plain(options: Any) -> dict[str, Any]:
    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) and not isinstance(options, type) else {}


@dataclass(frozen=True)
class Part:
    """One layer type of a hybrid: a registered variant and its (validated) options."""

    variant: Variant
    options: Any = None

    def changed(self) -> dict[str, Any]:
        """The options that differ from the variant's defaults, sorted by name."""
        mine, default = _plain(self.options), _plain(self.variant.make_options(None))
        return {k: mine[k] for k in sorted(mine) if mine[k] != default.get(k)}

    @property
    def label(self) -> str:
        changed = self.changed()
        opts = ", ".join(f"{k}={json.dumps(v)}" for k, v in changed.items())
        return self.variant.name + (f"({opts})" if opts else "")


@dataclass(frozen=True)
class LayerOptions:
    variant: str
    options: Any


@dataclass(frozen=True)
class HybridOptions:
    """What a hybrid puts on ``ModelConfig.options``: each part's variant and options, in
    pattern order (so a content key covers every part's options)."""

    pattern: tuple[LayerOptions, ...]


@dataclass(frozen=True)
class _PerLayer:
    """Base of the hybrid's per-layer callables: layer i belongs to part i mod len(parts)."""

    parts: tuple[Part, ...]

    def at(self, config: ModelConfig, layer_idx: int) -> tuple[int, Part, ModelConfig]:
        k = layer_idx % len(self.parts)
        part = self.parts[k]
        return k, part, config.replace(options=part.options)


class _BuildMixer(_PerLayer):
    def __call__(self, config: ModelConfig, layer_idx: int) -> nn.Module:
        from torch import nn  # building a model: torch is loaded already

        k, part, cfg = self.at(config, layer_idx)
        mixer = part.variant.build_mixer(cfg, layer_idx)
        if isinstance(mixer, nn.Module):
            setattr(mixer, PART_ATTR, k)  # attention_maps dispatches on it
        return mixer


def _declared(part: Part, fn: Callable[..., R] | None, what: str) -> Callable[..., R]:
    """A part's declared per-layer callable (the hybrid declares one only when every part does)."""
    if fn is None:
        raise NotImplementedError(f"hybrid part {part.label} declares no {what}")
    return fn


class _StateSize(_PerLayer):
    def __call__(self, config: ModelConfig, layer_idx: int, T: int) -> int:
        _, part, cfg = self.at(config, layer_idx)
        return _declared(part, part.variant.state_size, "state_size")(cfg, layer_idx, T)


class _FlopsPerToken(_PerLayer):
    def __call__(self, config: ModelConfig, layer_idx: int, T: int) -> float:
        _, part, cfg = self.at(config, layer_idx)
        return _declared(part, part.variant.flops_per_token, "flops_per_token")(cfg, layer_idx, T)


@dataclass(frozen=True)
class _PartHolds:
    """A part's declared constraint, checked with that part's options on the config."""

    part: Part
    constraint: ShapeConstraint

    def __call__(self, config: ModelConfig) -> bool:
        return self.constraint.holds(config.replace(options=self.part.options))


def _part_constraints(parts: tuple[Part, ...]) -> tuple[ShapeConstraint, ...]:
    """Every part's constraints, each named by the layers it binds ("gla layers: head_dim % 2 == 0")."""
    found = {
        f"{p.label} layers: {c.rule}": ShapeConstraint(f"{p.label} layers: {c.rule}", _PartHolds(p, c), c.why)
        for p in parts
        for c in p.variant.constraints
    }
    return tuple(found.values())


class _AttentionMaps(_PerLayer):
    def __call__(self, mixer: nn.Module, x: Any) -> Any:
        return self.parts[getattr(mixer, PART_ATTR)].variant.attention_maps(mixer, x)


@dataclass(frozen=True)
class HybridVariant(Variant):
    """A variant made of parts, one per layer, repeating (see the module docstring)."""

    parts: tuple[Part, ...] = ()

    def hybrid_options(self) -> HybridOptions:
        return HybridOptions(tuple(LayerOptions(p.variant.name, p.options) for p in self.parts))

    def make_options(self, raw: dict[str, Any] | None) -> Any:
        """A hybrid's options are its parts' options; ``raw`` may only restate them (as a
        stored model config does)."""
        mine = self.hybrid_options()
        if raw and _normal(raw) != _normal(dataclasses.asdict(mine)):
            raise ValueError(
                f"the options of hybrid {self.name!r} are its layers' options, set in "
                "model.layers ({variant: NAME, options: {...}}); got other options "
                f"{json.dumps(raw, default=str)[:200]}"
            )
        return mine

    def layer_decode(self) -> list[str]:
        """The decode kind of each part, in pattern order."""
        return [p.variant.decode for p in self.parts]

    def capabilities(self) -> dict[str, Any]:
        return {**super().capabilities(), "layers": [p.label for p in self.parts], "layer_decode": self.layer_decode()}


def _normal(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _runs(labels: list[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1] + 1)
        else:
            out.append((label, 1))
    return out


def period(labels: list[str]) -> int:
    """Length of the shortest pattern that, repeated, gives ``labels``."""
    n = len(labels)
    return next(p for p in range(1, n + 1) if n % p == 0 and labels == labels[:p] * (n // p))


def hybrid_name(parts: Iterable[Part]) -> str:
    """The pattern's name: runs of equal layers as "name xN", joined by " + "."""
    return SEP.join(label + (f" x{n}" if n > 1 else "") for label, n in _runs([p.label for p in parts]))


def is_hybrid_name(name: str) -> bool:
    return SEP in name or "(" in name or bool(re.search(r" x[0-9]+$", name))


def _join(values: Iterable[str]) -> str:
    return "+".join(dict.fromkeys(v for v in values if v))


def compose(parts: list[Part]) -> HybridVariant:
    """The hybrid of ``parts`` (one per layer of a pattern; reduced to its shortest period)."""
    labels = [p.label for p in parts]
    parts = parts[: period(labels)]
    if len({p.label for p in parts}) < 2:
        raise UnknownVariantError(
            f"layers {labels} use one layer type only ({labels[0]}); a hybrid mixes at least two. "
            "Run that variant itself (with variant_options) instead"
        )
    kinds = [p.variant.decode for p in parts]
    per = tuple(parts)

    def all_have(attr: str) -> bool:
        return all(getattr(p.variant, attr) is not None for p in parts)

    return HybridVariant(
        name=hybrid_name(parts),
        build_mixer=_BuildMixer(per),
        description="hybrid: "
        + ", ".join(f"layer {i}: {p.label}" for i, p in enumerate(parts))
        + f" (repeated to n_layer; {len(parts)} layers a period)",
        decode="none" if "none" in kinds else _join(kinds),
        state_size=_StateSize(per) if all_have("state_size") else None,
        flops_per_token=_FlopsPerToken(per) if all_have("flops_per_token") else None,
        causal=all(p.variant.causal for p in parts),
        aux_loss=any(p.variant.aux_loss for p in parts),
        version=_join(f"{p.variant.name}={p.variant.version}" for p in parts),
        attention_maps=_AttentionMaps(per) if all_have("attention_maps") else None,
        constraints=_part_constraints(per),
        plugin=_join(p.variant.plugin for p in parts),
        distribution=_join(p.variant.distribution for p in parts),
        source_files=tuple(sorted({f for p in parts for f in p.variant.source_files})),
        parts=per,
    )


def make_part(variant: Variant, raw: dict[str, Any] | None, where: str) -> Part:
    try:
        return Part(variant, variant.make_options(raw))
    except ValueError as exc:
        raise UnknownVariantError(f"{where}: {exc}") from None


def _split_options(text: str) -> dict[str, Any]:
    """ "k=1, m=\"relu\"" -> {"k": 1, "m": "relu"} (values are JSON, as names write them)."""
    out: dict[str, Any] = {}
    depth, quoted, start, items = 0, False, 0, []
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch in "[{":
            depth += 1
        elif not quoted and ch in "]}":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    for item in items:
        key, eq, value = item.strip().partition("=")
        if not eq:
            raise ValueError(f"option {item.strip()!r} is not KEY=VALUE")
        out[key.strip()] = json.loads(value)
    return out


def parse_hybrid(name: str, lookup: Callable[[str], Variant]) -> HybridVariant:
    """The hybrid a name written by ``hybrid_name`` stands for; ``lookup`` finds registered
    variants (raising UnknownVariantError). The name must be the canonical one."""
    parts: list[Part] = []
    for run in name.split(SEP):
        m = _RUN_RE.match(run.strip())
        if not m:
            raise UnknownVariantError(
                f"unknown variant {name!r}: {run.strip()!r} is not a layer run; write a hybrid as "
                "'NAME xN + NAME' (e.g. 'gated_deltanet x3 + softmax'), options as NAME(key=value)"
            )
        try:
            raw = _split_options(m["opts"]) if m["opts"] else None
        except ValueError as exc:
            raise UnknownVariantError(f"hybrid {name!r}: options of {m['name']!r}: {exc}") from None
        try:
            variant = lookup(m["name"])
        except UnknownVariantError as exc:
            raise UnknownVariantError(f"hybrid {name!r}: {exc}") from None
        part = make_part(variant, raw, f"hybrid {name!r}")
        parts.extend([part] * int(m["n"] or 1))
    hybrid = compose(parts)
    if hybrid.name != name:
        raise UnknownVariantError(f"hybrid {name!r} is written {hybrid.name!r}; use that name")
    return hybrid
