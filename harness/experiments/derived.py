"""Derived rows (fits computed from stored cells), stored as runs of their own kind.

A derived run's ``cell_key`` is the content hash of what it was computed from (the
input cells' keys, settings, the fitting code), so a finalizer called again with the
same inputs stores nothing, and new or changed inputs give a new row.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from attnbench.store.database import Result, RunRecord, Store
from attnbench.store.provenance import content_key, provenance


def save_derived(
    store: Store,
    *,
    kind: str,
    suite: str,
    experiment: str,
    variant: str,
    inputs: dict[str, Any],
    device: torch.device,
    results: list[Result],
    summary: dict[str, Any] | None = None,
) -> bool:
    """Store one derived run keyed by ``inputs``; False when it is already stored."""
    key = content_key({"kind": kind, **inputs})
    if store.has_run(key):
        return False
    now = time.time()
    store.save_run(
        RunRecord(
            cell_key=key,
            suite=suite,
            experiment=experiment,
            kind=kind,
            variant=variant,
            status="done",
            seed=None,
            coords={"variant": variant},
            config={"key_inputs": inputs},
            provenance=provenance(device),
            summary=summary or {},
            started_at=now,
            finished_at=now,
            results=results,
        )
    )
    return True
