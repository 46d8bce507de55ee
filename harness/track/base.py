"""The tracker contract (trackers are found in ``track.registry``).

A tracker receives each cell's record once the store holds it: its training curve points
(step, name, value), its eval rows and speed points (results with their tags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol


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


def track_record(trackers: list[Tracker], record: Any) -> None:
    """Send one stored cell (a ``RunRecord``) to every tracker."""
    cell = {"suite": record.suite, "experiment": record.experiment, "kind": record.kind,
            "variant": record.variant, "seed": record.seed, "coords": record.coords,
            "key": record.cell_key, "status": record.status}
    for tracker in trackers:
        tracker.log_cell(cell, record.metrics, record.results)
