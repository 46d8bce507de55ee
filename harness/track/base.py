"""The tracker contract and how trackers are found (the `attnbench_register_trackers` hook).

A tracker receives each cell's record once the store holds it: its training curve points
(step, name, value), its eval rows and speed points (results with their tags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from attnbench.errors import PluginError, TrackerError


class Tracker(Protocol):
    def log_cell(self, cell: dict[str, Any], metrics: list[Any], results: list[Any]) -> None:
        """One stored cell: ``cell`` names it (suite, experiment, kind, variant, seed,
        coords, key, status); ``metrics`` are curve points (step, tokens, elapsed_s, name,
        value); ``results`` eval rows and speed points (name, value, unit, tags)."""

    def close(self) -> None:
        """Flush and release; called once at the end of the suite."""


@dataclass(frozen=True)
class TrackerSpec:
    """A tracker a plugin registers: ``make(out_dir, suite)`` builds it for one run."""

    name: str
    make: Callable[[Path, str], Tracker]
    description: str = ""
    extra: str = ""  # the pip extra that installs its library, e.g. "tensorboard"


def registered_trackers(plugins: Iterable[tuple[str, Any]] = ()) -> dict[str, TrackerSpec]:
    """Every tracker: the built-ins, those installed plugins register, and ``plugins``
    ((name, module-or-object) pairs registered in-process)."""
    from attnbench.registry.loader import get_plugin_manager
    from attnbench.track import builtin

    loaded = get_plugin_manager([("attnbench-trackers", builtin), *plugins])
    found: dict[str, TrackerSpec] = {}
    for impl in loaded.manager.hook.attnbench_register_trackers.get_hookimpls():
        def register(spec: Any, _plugin: str = impl.plugin_name) -> None:
            if not isinstance(spec, TrackerSpec):
                raise PluginError(f"plugin {_plugin!r} registered {type(spec).__name__}; pass a TrackerSpec")
            if spec.name in found:
                raise PluginError(f"tracker {spec.name!r} is registered twice (plugin {_plugin!r})")
            found[spec.name] = spec
        impl.function(register=register)
    return found


def make_trackers(names: list[str], out_dir: Path, suite: str,
                  plugins: Iterable[tuple[str, Any]] = ()) -> list[Tracker]:
    """The trackers named (``--track`` or the suite's ``track:``), each writing under
    ``out_dir``; an unknown name or a missing library is an error before anything runs."""
    if not names:
        return []
    known = registered_trackers(plugins)
    out = []
    for name in names:
        if name not in known:
            raise TrackerError(f"unknown tracker {name!r}; available: {sorted(known)}")
        out.append(known[name].make(out_dir / name, suite))
    return out


def track_record(trackers: list[Tracker], record: Any) -> None:
    """Send one stored cell (a ``RunRecord``) to every tracker."""
    cell = {"suite": record.suite, "experiment": record.experiment, "kind": record.kind,
            "variant": record.variant, "seed": record.seed, "coords": record.coords,
            "key": record.cell_key, "status": record.status}
    for tracker in trackers:
        tracker.log_cell(cell, record.metrics, record.results)
