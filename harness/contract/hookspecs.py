"""Hook specifications: the whole plugin contract, in one small typed file.

Plugins implement these with ``@attnbench.hookimpl`` and are found through the
``attnbench`` entry-point group. Hooks are always called with keyword arguments; a spec
may gain parameters in later versions but never loses one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from attnbench.contract.task import Task
    from attnbench.contract.variant import Variant

hookspec = pluggy.HookspecMarker("attnbench")
hookimpl = pluggy.HookimplMarker("attnbench")  # what plugins decorate their hooks with


@hookspec
def attnbench_register_variants(register: Callable[[Variant], None]) -> None:
    """Register attention variants.

    :param register: call once per variant with a ``attnbench.Variant``; the harness
        validates it and rejects a name another plugin already registered.
    """


@hookspec
def attnbench_register_tasks(register: Callable[[Task], None]) -> None:
    """Register synthetic tasks (generated in-process, deterministic from a seed).

    :param register: call once per task with a ``attnbench.contract.task.Task``; a name another
        plugin already registered is an error naming both.
    """


@hookspec
def attnbench_register_trackers(register: Callable[[Any], None]) -> None:
    """Register experiment trackers (curves, eval rows and speed points mirrored beside the store).

    :param register: call once per tracker with a ``attnbench.track.base.TrackerSpec``;
        ``attnbench run --track NAME`` or the suite's ``track:`` chooses it.
    """
