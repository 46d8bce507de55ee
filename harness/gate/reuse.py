"""Gate results reused within one process. A run gates each variant once per experiment's
lengths, and all but the probes at a new length come out the same each time: a length-free
check, a check's fixed lengths, one experiment length are each computed once per process.

A part is keyed by the variant by value (equal fields: the same builders, so the same results),
the checked config (options included), device, long_T, seed, autocast and the part's name; the
store's verdict cache is keyed by code content as before. Parts are kept only when every check of
the variant finished inside its time limit (an abandoned thread runs under other torch settings),
and a length the mixer could not run at, or a check that errored, is computed again.

    reuse = Reuse.of(variant, config, device, long_T, seed, autocast)   # one per run_checks call
    probe = reuse.get(("leak_forward", 512), lambda: probe_at(512))
    reuse.keep()                                                        # the variant finished in time
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

V = TypeVar("V")

_DONE: dict[Hashable, Any] = {}  # (context key, part) -> value, for this process
_LOCK = threading.Lock()


class Reuse:
    """One variant's parts for one ``run_checks`` call: read from the process's, kept on ``keep``."""

    def __init__(self, key: Hashable | None = None) -> None:
        self.key = key  # None: nothing reused (a variant with an unhashable field, or a bare context)
        self.new: dict[Hashable, Any] = {}

    @classmethod
    def of(cls, variant: Any, config: Any, device: Any, long_T: int, seed: int, autocast: tuple[str, ...]) -> Reuse:
        key = (variant, repr(config), str(device), long_T, seed, autocast)
        try:
            hash(key)
        except TypeError:
            return cls(None)
        return cls(key)

    def get(self, part: Hashable, compute: Callable[[], V], keep: Callable[[V], bool] = lambda _: True) -> V:
        """The part's value: computed once per process (an exception is raised, not kept);
        ``keep(value)`` false computes it again next time."""
        if self.key is None:
            return compute()
        full = (self.key, part)
        with _LOCK:
            if full in _DONE:
                return _DONE[full]
        value = compute()
        if keep(value):
            self.new[full] = value
        return value

    def keep(self) -> None:
        """Make this call's parts reusable by later calls in this process."""
        with _LOCK:
            _DONE.update(self.new)
        self.new = {}
