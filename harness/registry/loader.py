"""Plugin loading: entry points -> pluggy manager -> validated variant registry.

Nothing is loaded at import time; call ``get_plugin_manager()`` / ``load_registry()``.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pluggy

from attnbench.contract import hookspecs
from attnbench.contract.constraints import ShapeConstraint
from attnbench.contract.reference import FORMAT, LazyObject
from attnbench.contract.task import Task
from attnbench.contract.variant import DECODE_KINDS, Variant
from attnbench.errors import PluginError, UnknownVariantError, quoted
from attnbench.registry.hybrid import Part, compose, is_hybrid_name, parse_hybrid
from attnbench.registry.identity import plugin_source_files

ENTRY_POINT_GROUP = "attnbench"
# Fields a plugin may give as a callable or as a "package.module:object" string (imported on first use).
LAZY_FIELDS = {
    "variant": ("build_mixer", "build_model", "attention_maps"),
    "task": ("generate", "evaluate", "guess_accuracy"),
}
PLUGINS_ENV = "ATTNBENCH_PLUGINS"  # comma-separated entry-point names to load; unset = all
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


@dataclass(frozen=True)
class PluginLoadError:
    """A plugin that failed to import or to register; the others still load."""

    plugin: str
    error: str


@dataclass
class LoadedPlugins:
    manager: pluggy.PluginManager
    distributions: dict[str, str] = field(default_factory=dict)  # plugin name -> dist
    errors: list[PluginLoadError] = field(default_factory=list)


def _allowed_names() -> set[str] | None:
    raw = os.environ.get(PLUGINS_ENV)
    if raw is None:
        return None
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if not names:
        raise PluginError(
            f"{PLUGINS_ENV} is set but names no plugin ({raw!r}), which would load none; give "
            f"comma-separated plugin names (e.g. {PLUGINS_ENV}=softmax,linear) or unset it to load all"
        )
    return names


def get_plugin_manager(extra_plugins: Iterable[tuple[str, Any]] = (), *, entry_points: bool = True) -> LoadedPlugins:
    """A fresh plugin manager with installed entry points (filtered by ATTNBENCH_PLUGINS)
    and ``extra_plugins`` ((name, module-or-object) pairs) registered, then checked."""
    pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
    pm.add_hookspecs(hookspecs)
    loaded = LoadedPlugins(pm)
    if entry_points:
        allowed = _allowed_names()
        _check_allowed(allowed, [ep.name for ep in md.entry_points(group=ENTRY_POINT_GROUP)])
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            if allowed is not None and ep.name not in allowed:
                continue
            if pm.has_plugin(ep.name):
                continue
            dist = ep.dist.name if ep.dist is not None else "?"
            try:
                module = ep.load()
                pm.register(module, name=ep.name)
            except Exception as exc:  # a broken plugin must not take the others down
                loaded.errors.append(PluginLoadError(ep.name, f"{type(exc).__name__}: {exc}"))
                continue
            loaded.distributions[ep.name] = dist
    for name, plugin in extra_plugins:
        try:
            pm.register(plugin, name=name)
        except Exception as exc:
            loaded.errors.append(PluginLoadError(name, f"{type(exc).__name__}: {exc}"))
            continue
        loaded.distributions[name] = "(in-process)"
    _check_pending(pm)
    return loaded


def _check_allowed(allowed: set[str] | None, installed: list[str]) -> None:
    """A name in ATTNBENCH_PLUGINS that no installed plugin has would load nothing, silently."""
    unknown = sorted((allowed or set()) - set(installed))
    if unknown:
        hints = [
            n + (f" (did you mean {c[0]!r}?)" if (c := difflib.get_close_matches(n, installed, n=1)) else "")
            for n in unknown
        ]
        raise PluginError(
            f"{PLUGINS_ENV} names {', '.join(hints)}, which no installed plugin provides; "
            f"installed: {', '.join(sorted(installed))}. Fix the names or unset {PLUGINS_ENV}."
        )


def _check_pending(pm: pluggy.PluginManager) -> None:
    """Reject hook implementations whose name matches no spec (usually a typo)."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        known = [n for n in dir(hookspecs) if n.startswith("attnbench_")]
        bad = [n for n in dir(exc.plugin) if n.startswith("attnbench_") and n not in known]
        hints = []
        for name in bad:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        plugin_name = pm.get_name(exc.plugin) or repr(exc.plugin)
        raise PluginError(
            f"plugin {plugin_name!r} implements unknown hook {', '.join(hints) or str(exc)}; "
            f"known hooks: {', '.join(known)}. Fix the hook name in the plugin."
        ) from exc


def _validate(variant: Any, plugin_name: str) -> Variant:
    if not isinstance(variant, Variant):
        raise PluginError(
            f"plugin {plugin_name!r} called register() with {type(variant).__name__}; pass a attnbench.Variant"
        )
    if not _NAME_RE.match(variant.name):
        raise PluginError(
            f"plugin {plugin_name!r} registered invalid variant name {variant.name!r}; "
            "use lower-case letters, digits, '-' and '_'"
        )
    variant = _with_owned_references(variant, "variant", plugin_name)
    if not callable(variant.build_mixer):
        raise PluginError(f"variant {variant.name!r} (plugin {plugin_name!r}): build_mixer is not callable")
    if variant.decode not in DECODE_KINDS:
        raise PluginError(
            f"variant {variant.name!r} (plugin {plugin_name!r}): decode={variant.decode!r}, "
            f"expected one of {DECODE_KINDS}"
        )
    declared = variant.constraints
    if not isinstance(declared, (tuple, list)) or not all(isinstance(c, ShapeConstraint) for c in declared):
        raise PluginError(
            f"variant {variant.name!r} (plugin {plugin_name!r}): constraints={quoted(declared)}; give a "
            "tuple of attnbench.ShapeConstraint (e.g. ShapeConstraint.multiple_of('head_dim', 2, why))"
        )
    return variant if isinstance(declared, tuple) else replace(variant, constraints=tuple(declared))


def _with_owned_references(item: Any, kind: str, plugin_name: str) -> Any:
    """Check the format of each "package.module:object" string a variant or task gives (they
    are imported on first use, not here) and name their owner for the errors that use may raise."""
    owned = {}
    for name in LAZY_FIELDS[kind]:
        ref = getattr(item, name)
        if not isinstance(ref, LazyObject):
            continue
        owner = f"{kind} {item.name!r} (plugin {plugin_name!r}): {name}"
        problem = ref.format_problem()
        if problem:
            raise PluginError(
                f"{owner}={problem}; give the callable itself or a {FORMAT!r} string naming it, "
                "e.g. 'mypkg.model:MyMixer'"
            )
        owned[name] = LazyObject(ref.target, owner)
    return replace(item, **owned) if owned else item


def _validate_task(task: Any, plugin_name: str) -> Task:
    if not isinstance(task, Task):
        raise PluginError(
            f"plugin {plugin_name!r} called register() with {type(task).__name__}; pass a attnbench.contract.task.Task"
        )
    if not _NAME_RE.match(task.name):
        raise PluginError(f"plugin {plugin_name!r} registered invalid task name {task.name!r}")
    task = _with_owned_references(task, "task", plugin_name)
    if task.tokens not in ("ids", "bytes"):
        raise PluginError(
            f"plugin {plugin_name!r} registered task {task.name!r} with tokens={task.tokens!r}; "
            "give tokens='ids' (token ids) or tokens='bytes' (UTF-8 bytes, vocabulary 256)"
        )
    return task


@dataclass
class Registry:
    """Variants and tasks by name, with the plugin and distribution each came from."""

    variants: dict[str, Variant]
    errors: list[PluginLoadError]
    tasks: dict[str, Task] = field(default_factory=dict)
    hybrids: dict[str, Variant] = field(default_factory=dict, repr=False)  # built from their names

    def names(self) -> list[str]:
        return sorted(self.variants)

    def _registered(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            raise UnknownVariantError(unknown_variant_message(name, self.names())) from None

    def get(self, name: str) -> Variant:
        """A registered variant, or the hybrid a pattern name stands for ("gla x3 + softmax")."""
        if name in self.variants or not is_hybrid_name(name):
            return self._registered(name)
        if name not in self.hybrids:
            self.hybrids[name] = parse_hybrid(name, self._registered)
        return self.hybrids[name]

    def compose(self, parts: list[Part]) -> Variant:
        """The hybrid of ``parts`` (one per layer), kept so ``get`` finds it by name."""
        hybrid = compose(parts)
        return self.hybrids.setdefault(hybrid.name, hybrid)

    def get_task(self, name: str) -> Task:
        try:
            return self.tasks[name]
        except KeyError:
            message = unknown_variant_message(name, sorted(self.tasks)).replace("unknown variant", "unknown task")
            if os.environ.get(PLUGINS_ENV) is not None:
                message += (
                    f" ({PLUGINS_ENV}={os.environ[PLUGINS_ENV]!r} limits which plugins load: add the plugin "
                    f"that registers {quoted(name)} (see `attnbench list` without {PLUGINS_ENV}) or unset it)"
                )
            raise UnknownVariantError(message) from None


def unknown_variant_message(name: str, available: list[str]) -> str:
    close = difflib.get_close_matches(name, available, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown variant {quoted(name)}.{hint} Available: {', '.join(available) or '(none)'}"


def _collect(loaded: LoadedPlugins, hook: str, validate, errors: list[PluginLoadError]) -> dict[str, Any]:
    """Call every implementation of a register-callback hook, one plugin at a time, so
    each registration is attributed to its plugin; a plugin that raises is reported."""
    found: dict[str, Any] = {}
    for impl in getattr(loaded.manager.hook, hook).get_hookimpls():
        plugin_name = impl.plugin_name
        dist = loaded.distributions.get(plugin_name, "?")
        mine: list[Any] = []

        def register(item: Any, _p: str = plugin_name, _mine: list = mine) -> None:
            _mine.append(validate(item, _p))

        try:
            impl.function(register=register)
        except PluginError:
            raise
        except Exception as exc:
            errors.append(PluginLoadError(plugin_name, f"{type(exc).__name__}: {exc}"))
            continue
        for item in mine:
            if item.name in found:
                other = found[item.name]
                raise PluginError(
                    f"{item.name!r} is registered twice: by plugin {other.plugin!r} "
                    f"({other.distribution}) and by plugin {plugin_name!r} ({dist}). "
                    f"Uninstall one, or limit loading with {PLUGINS_ENV}=name,name."
                )
            found[item.name] = replace(
                item, plugin=plugin_name, distribution=dist, source_files=plugin_source_files(item, impl.plugin)
            )
    return found


def load_registry(loaded: LoadedPlugins | None = None) -> Registry:
    """Call every plugin's registration hooks and collect variants and tasks."""
    loaded = loaded or get_plugin_manager()
    errors = list(loaded.errors)
    variants = _collect(loaded, "attnbench_register_variants", _validate, errors)
    tasks = _collect(loaded, "attnbench_register_tasks", _validate_task, errors)
    return Registry(variants, errors, tasks)
