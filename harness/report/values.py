"""Numbers as the report shows them: means with 95% confidence intervals over seeds, and
one formatting rule per kind of value (counts, bytes, seconds, fractions)."""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnbench.stats.intervals import t_quantile_975

MISSING = "—"
NOT_DECLARED = "not declared"  # an optional fact the variant does not declare (e.g. no flops_per_token)
OPTION_PREFIX = "variant_options."  # grid coordinates that sweep a variant's own option
# Coordinates of a cell that are not grid (hyper-parameter) coordinates.
NON_GRID_COORDS = frozenset(
    {"variant", "model", "d_model", "n_layer", "seed", "from_experiment", "stage", "rung", "battery", "replication"}
)


@dataclass(frozen=True)
class MeanCI:
    """Mean of n values and its two-sided 95% Student-t interval (None when n < 2)."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int

    @property
    def half(self) -> float | None:
        return None if self.lo is None or self.hi is None else (self.hi - self.lo) / 2


def mean_ci(values: Iterable[Any], bounds: tuple[float, float] | None = None) -> MeanCI:
    """The mean and its 95% Student-t interval, cut to ``bounds`` where the quantity has them (an
    accuracy's interval never leaves [0, 1]: the cut removes only values it cannot take)."""
    xs = [float(v) for v in values if is_number(v)]
    n = len(xs)
    if n == 0:
        return MeanCI(None, None, None, 0)
    mean = sum(xs) / n
    if n < 2:
        return MeanCI(mean, None, None, 1)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return MeanCI(mean, lo, hi, n)


def is_number(v: Any) -> bool:
    """A finite real number, numpy's included (a DataFrame's integer column gives numpy ints)."""
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v)


def num(v: Any, digits: int = 4) -> str:
    """A float with ``digits`` significant digits; ints as ints with thousands separators."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.{digits}g}"
    return str(v)


def ci_text(m: MeanCI, digits: int = 4) -> str:
    """'3.201 ± 0.012 (n=2)', or the mean alone when one seed gives no interval."""
    if m.mean is None or not is_number(m.mean):
        return MISSING
    if not is_number(m.half) or m.lo is None or m.hi is None:
        return f"{num(m.mean, digits)} (n={m.n})"
    if not math.isclose(m.mean - m.lo, m.hi - m.mean, rel_tol=1e-6, abs_tol=1e-12):  # cut at a bound
        return f"{num(m.mean, digits)} [{num(m.lo, digits)}, {num(m.hi, digits)}] (n={m.n})"
    return f"{num(m.mean, digits)} ± {num(m.half, 2)} (n={m.n})"


def fact_text(summaries: Iterable[dict[str, Any]], key: str, fmt: Callable[[Any], str] = num) -> str:
    """A declared fact's mean over runs, "not declared" where the runs recorded it as None
    (the variant omits it), or MISSING where no run recorded it at all."""
    summaries = list(summaries)
    m = mean_ci(s.get(key) for s in summaries)
    if m.mean is not None:
        return fmt(m.mean)
    return NOT_DECLARED if any(key in s for s in summaries) else MISSING


def bytes_text(v: Any) -> str:
    if not is_number(v):
        return MISSING
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= size:
            return f"{v / size:.3g} {unit}"
    return f"{int(v)} B"


def seconds_text(v: Any) -> str:
    if not is_number(v):
        return MISSING
    if v >= 1:
        return f"{v:.3g} s"
    if v >= 1e-3:
        return f"{v * 1e3:.3g} ms"
    return f"{v * 1e6:.3g} µs"


def point_text(point: dict[str, Any]) -> str:
    """A grid point as 'lr=0.003, feature_map=relu' ('(single point)' for none); a swept
    variant option (variant_options.VARIANT.OPTION) is named by its option."""
    if not point:
        return "(single point)"
    short = {
        (k.split(".", 2)[2] if k.startswith(OPTION_PREFIX) and k.count(".") >= 2 else k): v for k, v in point.items()
    }
    return ", ".join(f"{k}={num(v) if is_number(v) else v}" for k, v in sorted(short.items()))


def grid_point(coords: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in coords.items() if k not in NON_GRID_COORDS}


def key_of(obj: Any) -> str:
    """A hashable, order-independent key for a dict or list."""
    return json.dumps(obj, sort_keys=True, default=str)


def scalar(v: Any) -> Any:
    """One cell of a data table: lists and dicts as JSON text, others unchanged."""
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, sort_keys=True, default=str)
    return v
