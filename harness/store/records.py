"""What one finished cell stores: its run row, curve points and named results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Metric:
    step: int
    tokens: int
    elapsed_s: float
    name: str
    value: float | None


@dataclass
class Result:
    name: str
    value: float | None
    unit: str = ""
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunRecord:
    """Everything one finished cell stores; written atomically by ``Store.save_run``."""

    cell_key: str
    suite: str
    experiment: str
    kind: str
    variant: str
    status: str  # "done", "diverged", "failed", "oom", "timeout", "check_failed"
    seed: int | None
    coords: dict[str, Any]
    config: dict[str, Any]
    provenance: dict[str, Any]
    summary: dict[str, Any]
    started_at: float
    finished_at: float
    error: str | None = None
    metrics: list[Metric] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
