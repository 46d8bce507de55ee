"""Finding trackers: the built-ins and every plugin's `attnbench_register_trackers`."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnbench.errors import PluginError, TrackerError
from attnbench.registry.loader import get_plugin_manager
from attnbench.track import builtin
from attnbench.track.base import Tracker, TrackerSpec
from attnbench.track.builtin import missing_message


def registered_trackers(plugins: Iterable[tuple[str, Any]] = ()) -> dict[str, TrackerSpec]:
    """Every tracker: the built-ins, those installed plugins register, and ``plugins``
    ((name, module-or-object) pairs registered in-process)."""
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


def check_trackers(names: list[str], plugins: Iterable[tuple[str, Any]] = ()) -> dict[str, TrackerSpec]:
    """The specs of the trackers named; an unknown name, or a module a tracker ``requires``
    that is not installed, is an error. Creates nothing (a run checks this before its store)."""
    if not names:
        return {}
    known = registered_trackers(plugins)
    for name in names:
        if name not in known:
            raise TrackerError(f"unknown tracker {name!r}; available: {sorted(known)}")
        for module in known[name].requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a parent package that does not import
                found = False
            if not found:
                raise TrackerError(
                    f"tracker {name!r}: " + missing_message(module, known[name].extra or name, "not installed")
                )
    return {name: known[name] for name in names}


def make_trackers(
    names: list[str], out_dir: Path, suite: str, plugins: Iterable[tuple[str, Any]] = ()
) -> list[Tracker]:
    """The trackers named (``--track`` or the suite's ``track:``), each writing under
    ``out_dir``; an unknown name or a missing library is an error before anything runs, and
    a tracker that fails to start leaves none of the folders this call made."""
    specs = check_trackers(names, plugins)
    own = [p for p in (out_dir / name for name in specs) if not p.exists()]  # each tracker's own folder
    above = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # possibly shared: removed if empty
    out: list[Tracker] = []
    try:
        for name, spec in specs.items():
            _make_folder(out_dir / name, name)
            out.append(spec.make(out_dir / name, suite))
    except BaseException:
        for tracker in out:
            with contextlib.suppress(Exception):
                tracker.close()
        for folder in own:
            shutil.rmtree(folder, ignore_errors=True)
        for folder in above:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return out


def _make_folder(folder: Path, name: str) -> None:
    """The tracker's folder, made now: a file in the way is found before any cell trains, not
    when the tracker first writes (after a cell trained, which then failed)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        why = f"{blocking} is a file" if blocking is not None else f"{type(exc).__name__}: {exc.strerror or exc}"
        raise TrackerError(
            f"tracker {name!r} writes under {folder}, which cannot be made ({why}); move "
            f"{blocking or 'it'} aside, or give --store in another folder (trackers write in "
            "tracking/ beside the store)"
        ) from None
