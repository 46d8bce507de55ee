"""The key under which a sweep's plan reaches its pytest-benchmark session (``config.stash``).
Its own module, imported only inside a sweep, so that loading the speed kind (``attnbench
validate``, ``attnbench suites``) does not import pytest."""

from __future__ import annotations

from typing import Any, Protocol

import pytest


class Plan(Protocol):
    """What the session's test module asks of the sweep (``timing.SweepPlan``)."""

    def lengths(self) -> list[int]: ...

    def run_point(self, benchmark: Any, T: int) -> None: ...


PLAN_KEY: pytest.StashKey[Plan] = pytest.StashKey()
