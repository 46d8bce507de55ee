"""Which cut points t the causality checks test at a length T (issue 65).

A cut t asks: do outputs at positions <= t depend on any input at a position > t? Testing every
cut 0 <= t <= T-2 tests every output position against every later input. Up to ``EVERY_UP_TO``
tokens the gate tests every cut; above, where a batch of T copies would cost too much:

- every chunk edge c*m - 1 and c*m, for 64 (the built-in kernels' chunk) and every chunk, block
  or window size among the variant's options (``chunk_sizes``);
- every power of two 2^k and 2^k +- 1;
- the first two and the last cut, and ``N_RANDOM`` cuts drawn from the seed.

    cut_points(1032, (64,), seed=0)   # -> (0, 1, 2, 3, ..., 63, 64, 65, 127, 128, 129, ...)
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

EVERY_UP_TO = 128  # up to this length every cut is tested
BUILT_IN_CHUNK = 64  # the chunk size of the built-in chunked kernels
N_RANDOM = 16  # random cuts added at longer lengths
_SIZE_WORDS = ("chunk", "block", "window")  # option names whose integer values are chunk edges


def chunk_sizes(options: Any) -> tuple[int, ...]:
    """64 and each integer option of the variant whose name says chunk, block or window (a
    list of windows gives each of its sizes), sorted, each >= 2."""
    sizes = {BUILT_IN_CHUNK}
    if options is not None and dataclasses.is_dataclass(options) and not isinstance(options, type):
        for f in dataclasses.fields(options):
            if not any(word in f.name for word in _SIZE_WORDS):
                continue
            value = getattr(options, f.name)
            values = value if isinstance(value, (list, tuple)) else [value]
            sizes.update(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 2)
    return tuple(sorted(sizes))


def cut_points(T: int, sizes: tuple[int, ...], seed: int) -> tuple[int, ...]:
    """The cuts t (0 <= t <= T-2) tested at length T: all of them up to ``EVERY_UP_TO`` tokens,
    else the chunk edges, the powers of two +- 1, the ends and ``N_RANDOM`` random cuts."""
    if T <= EVERY_UP_TO:
        return tuple(range(T - 1))
    out = {0, 1, T - 2}
    for c in sizes:
        for edge in range(c, T, c):
            out.update((edge - 1, edge))
    power = 2
    while power <= T:
        out.update((power - 1, power, power + 1))
        power *= 2
    out.update(random.Random(seed * 7919 + T).sample(range(T - 1), min(N_RANDOM, T - 1)))
    return tuple(sorted(t for t in out if 0 <= t <= T - 2))


def describe(T: int, n_cuts: int) -> str:
    """How the cuts at T were chosen, for a verdict's detail."""
    if T <= EVERY_UP_TO:
        return f"T={T}: every position"
    return f"T={T}: {n_cuts} cuts (chunk edges, powers of two +-1, {N_RANDOM} random)"
