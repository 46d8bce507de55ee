"""The tracker contract (trackers are found in ``track.registry``).

A tracker receives each cell's record once the store holds it (``log_cell``): its training
curve points (step, name, value), its eval rows and speed points (results with their
tags). A tracker that also has ``log_points(cell, metrics)`` is sent the curve points live,
as the training loop logs them, for cells running in the driver's process; its
``log_cell`` then gets only the points it was not already sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class Tracker(Protocol):
    def log_cell(self, cell: dict[str, Any], metrics: list[Any], results: list[Any]) -> None:
        """One stored cell: ``cell`` names it (suite, experiment, kind, variant, seed,
        coords, key, status); ``metrics`` are curve points (step, tokens, elapsed_s, name,
        value) not already sent live; ``results`` eval rows and speed points (name, value,
        unit, tags)."""

    def close(self) -> None:
        """Flush and release; called once at the end of the suite."""


@runtime_checkable
class LiveTracker(Tracker, Protocol):
    def log_points(self, cell: dict[str, Any], metrics: list[Any]) -> None:
        """Curve points of a running cell, as the training loop logs them."""


@dataclass(frozen=True)
class TrackerSpec:
    """A tracker a plugin registers: ``make(out_dir, suite)`` builds it for one run."""

    name: str
    make: Callable[[Path, str], Tracker]
    description: str = ""
    extra: str = ""  # the pip extra that installs its library, e.g. "tensorboard"
    # modules it imports, checked before a run creates anything (a missing one refuses the run)
    requires: tuple[str, ...] = ()


def cell_fields(cell: Any, status: str = "running") -> dict[str, Any]:
    """What a tracker is told about a cell: from a planned ``Cell`` or a stored ``RunRecord``."""
    return {
        "suite": cell.suite,
        "experiment": cell.experiment,
        "kind": cell.kind,
        "variant": cell.variant,
        "seed": cell.seed,
        "coords": cell.coords,
        "key": getattr(cell, "cell_key", None) or cell.key,
        "status": getattr(cell, "status", status),
    }


@dataclass
class LiveCell:
    """One running cell's curve points, sent to the trackers that take them live."""

    trackers: list[LiveTracker]
    cell: dict[str, Any]
    sent: set[tuple[str, int]] = field(default_factory=set)  # (name, step) of every point sent

    @classmethod
    def for_cell(cls, trackers: list[Tracker], cell: Any) -> LiveCell | None:
        live = [t for t in trackers if isinstance(t, LiveTracker)]
        return cls(live, cell_fields(cell)) if live else None

    def __call__(self, metrics: list[Any]) -> None:
        for tracker in self.trackers:
            tracker.log_points(self.cell, metrics)
        self.sent.update((m.name, m.step) for m in metrics)


def track_record(trackers: list[Tracker], record: Any, live: LiveCell | None = None) -> None:
    """Send one stored cell (a ``RunRecord``) to every tracker; a tracker that had its
    curve live gets only the points it missed (e.g. those restored from a training state)."""
    cell = cell_fields(record)
    for tracker in trackers:
        sent = live.sent if live is not None and any(tracker is t for t in live.trackers) else None
        metrics = [m for m in record.metrics if (m.name, m.step) not in sent] if sent is not None else record.metrics
        tracker.log_cell(cell, metrics, record.results)
