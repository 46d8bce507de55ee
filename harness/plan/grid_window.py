"""Search windows on a grid axis: ``grid: {lr: {start: [1e-3, 3e-3], factor: 3, bounds: [1e-4, 3e-2]}}``.

Tuning (plan/halving.py) trains the ``start`` points; whenever a rung's best point lies on an
edge of the values tried on a window's axis, the next point beyond it (the edge times or over
``factor``, to 3 significant digits) joins the same rung, on the same seeds and budget. The
search stops where the best point is inside (a worse neighbour was tried: a diverged one counts
as worse), or where the next point would pass a declared bound. Everything here is a pure
function of the points and scores it is given, so the planner and the report reach the same
conclusion from the stored runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Point = Mapping[str, Any]  # a grid point: axis -> value
Side = Literal["lower", "upper"]
WORST = (math.inf, math.inf)
_TOLERANCE = 1e-9  # relative: a point computed onto a bound counts as on it
_SURE_FACTOR = 1.01  # at or above it, every 3-digit point's next point is a distinct 3-digit point
_WALK_LIMIT = 100_000  # points walked to check a smaller factor (beyond: the planner's own guard)


def _significant(x: float) -> float:
    """``x`` to 3 significant digits, as a reader writes a rate: 3e-3 * 3 is 0.009, not
    0.009000000000000001, and 1e-3 / 3 is 0.000333."""
    return float(f"{x:.3g}")


class GridWindow(BaseModel):
    """A grid axis searched from ``start`` outwards, by ``factor``, no further than ``bounds``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    start: list[float] = Field(min_length=2)
    """The points tried first: at least two, ascending and positive."""
    factor: float | None = Field(default=None, gt=1, allow_inf_nan=False)
    """Ratio of each added point to the edge it extends (> 1); None: the start points' own ratio (their geometric mean
    step)."""
    bounds: list[float] = Field(min_length=2, max_length=2)
    """[lower, upper]: no point beyond them is tried; they must contain the start points."""

    @field_validator("start", "bounds", "factor", mode="before")
    @classmethod
    def _no_bools(cls, raw: Any) -> Any:
        """YAML's true/false are not numbers here (pydantic would read them as 1.0 and 0.0)."""
        if isinstance(raw, bool) or (isinstance(raw, list) and any(isinstance(v, bool) for v in raw)):
            raise ValueError(f"{raw!r} holds true/false; give numbers (e.g. start: [1.0e-3, 3.0e-3])")
        return raw

    @model_validator(mode="after")
    def _ordered(self) -> GridWindow:
        if not all(math.isfinite(v) and v > 0 for v in (*self.start, *self.bounds)):
            raise ValueError(f"start {self.start} and bounds {self.bounds} must be positive numbers")
        if any(b <= a for a, b in zip(self.start, self.start[1:], strict=False)):
            raise ValueError(f"start {self.start} must be ascending, each value once (e.g. [1.0e-3, 3.0e-3])")
        lo, hi = self.bounds
        if not lo <= self.start[0] < self.start[-1] <= hi:
            raise ValueError(
                f"bounds {self.bounds} must contain start {self.start}: give [lower, upper] with "
                f"lower <= {self.start[0]:g} and upper >= {self.start[-1]:g}"
            )
        if self.factor is None:  # the start's own (geometric mean) ratio
            ratio = (self.start[-1] / self.start[0]) ** (1 / (len(self.start) - 1))
            object.__setattr__(self, "factor", float(f"{ratio:.4g}"))
        stuck = self._stuck_point()
        if stuck is not None:
            raise ValueError(
                f"factor {self.step():g} cannot move past {stuck:g}: to 3 significant digits the next point is "
                f"{stuck:g} again, so the search could not go on; give a factor of at least {_SURE_FACTOR:g} "
                "(e.g. 1.5 or 3)"
            )
        return self

    def _stuck_point(self) -> float | None:
        """The first point, walking out from ``start`` to each bound, whose next point rounds
        back onto it (a search that would re-plan the same point forever); None if there is none."""
        if self.step() >= _SURE_FACTOR:
            return None
        edges: tuple[tuple[float, Side], ...] = ((self.start[0], "lower"), (self.start[-1], "upper"))
        for value, side in edges:
            for _ in range(_WALK_LIMIT):
                nxt = self.beyond(value, side)
                if nxt is None:
                    break
                if (nxt >= value) if side == "lower" else (nxt <= value):
                    return value
                value = nxt
        return None

    def step(self) -> float:
        """The factor (resolved from ``start`` when not given)."""
        if self.factor is None:  # set by the validator
            raise ValueError("window without a factor")
        return self.factor

    def beyond(self, value: float, side: Side) -> float | None:
        """The next point past ``value`` on ``side``; None where it would pass that bound."""
        lo, hi = self.bounds
        if side == "upper":
            nxt = _significant(value * self.step())
            return nxt if nxt <= hi * (1 + _TOLERANCE) else None
        nxt = _significant(value / self.step())
        return nxt if nxt >= lo * (1 - _TOLERANCE) else None

    def bound(self, side: Side) -> float:
        return self.bounds[0] if side == "lower" else self.bounds[1]


def read_window(raw: Any, experiment: Any, key: str) -> GridWindow:
    """A window as a suite writes it; a ValueError naming ``experiment`` and ``key`` lists
    everything wrong with it, on one line."""
    try:
        return GridWindow.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise ValueError(
            f"experiment {experiment!r}: grid key {key!r} is a search window "
            f"({{start: [...], factor: F, bounds: [lower, upper]}}): {problems}"
        ) from None


def _problem(err: Any) -> str:
    """One pydantic error, as "bounds: Field required"."""
    where = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def windows_of(grid: Mapping[str, Any]) -> dict[str, GridWindow]:
    """The grid's window axes."""
    return {k: v for k, v in grid.items() if isinstance(v, GridWindow)}


def start_grid(grid: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The grid with each window replaced by its start points: what rung 0 trains."""
    return {k: list(v.start) if isinstance(v, GridWindow) else list(v) for k, v in grid.items()}


def read_windows(recorded: Any) -> dict[str, GridWindow]:
    """Windows as a stored protocol record lists them ({} for none, or for a record it cannot read)."""
    if not isinstance(recorded, Mapping):
        return {}
    out = {}
    for axis, raw in recorded.items():
        try:
            out[str(axis)] = GridWindow.model_validate(raw)
        except ValueError:
            continue
    return out


# -- the choice's criterion -----------------------------------------------------------------


def score(criterion: str, status: str | None, summary: Mapping[str, Any] | None) -> tuple[float, float]:
    """One run's rank key, lower is better: validation loss, or (for ``accuracy``) validation
    accuracy, higher first, then loss. A run that did not finish, diverged or gave a non-finite
    value ranks last."""
    if status != "done" or summary is None:
        return WORST
    loss = finite_number(summary.get("val_loss"))
    if criterion == "accuracy":
        acc = finite_number(summary.get("val_accuracy"))
        return (math.inf if acc is None else -acc, math.inf if loss is None else loss)
    return (math.inf if loss is None else loss, 0.0)


def mean_score(scores: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """A point's rank key over its seeds: the mean of each part (one failed seed ranks it last)."""
    got = list(scores)
    if not got:
        return WORST
    return (statistics.fmean(s[0] for s in got), statistics.fmean(s[1] for s in got))


def finite_number(v: Any) -> float | None:
    """``v`` as a float where it is a finite number (not a bool), else None."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


# -- where the search goes next -------------------------------------------------------------


def line_values(point: Point, axis: str, tried: Iterable[Point]) -> list[float]:
    """The values of ``axis`` tried at ``point``'s other coordinates, ascending."""
    others = {k: v for k, v in point.items() if k != axis}
    values = {float(p[axis]) for p in tried if axis in p and {k: v for k, v in p.items() if k != axis} == others}
    return sorted(values)


def edge_sides(point: Point, axis: str, tried: Iterable[Point]) -> list[Side]:
    """The edges of its line (the values tried on ``axis`` at its other coordinates) that
    ``point`` lies on: none for an inside point."""
    values = line_values(point, axis, tried)
    v = float(point[axis])
    sides: list[Side] = []
    if values and v == values[0]:
        sides.append("lower")
    if values and v == values[-1]:
        sides.append("upper")
    return sides


def extensions(windows: Mapping[str, GridWindow], best: Point, tried: Iterable[Point]) -> list[dict[str, Any]]:
    """The points to add to a rung whose best point is ``best``: on each window axis where it
    lies on an edge of the values tried, the next point beyond that edge, unless it passes the
    declared bound. [] when the best point is inside every window (or stopped at its bounds)."""
    tried = list(tried)
    out = []
    for axis, window in windows.items():
        if axis not in best:
            continue
        for side in edge_sides(best, axis, tried):
            nxt = window.beyond(float(best[axis]), side)
            if nxt is not None:
                out.append({**best, axis: nxt})
    return out


def stopped_at(window: GridWindow, axis: str, point: Point, tried: Iterable[Point]) -> Side | None:
    """The bound the search of ``axis`` stopped at with ``point`` chosen: ``point`` lies on
    that edge of the values tried and the next point beyond would pass the bound. None when it
    lies inside (or on an edge the search had not extended yet)."""
    for side in edge_sides(point, axis, tried):
        if window.beyond(float(point[axis]), side) is None:
            return side
    return None
