"""Experiment specifications: what each `kind` of suite experiment accepts.

Every experiment has the common fields of ``ExperimentBase`` (plan/base.py); its kind adds one mapping
named after it (``train:``, ...). The suite validates against the union of all kinds.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from attnbench.data.spec import DataSpec
from attnbench.errors import quoted
from attnbench.plan.base import ExperimentBase, TrainSpec, grid_points, option_key, spec_as
from attnbench.plan.downstream_spec import FinetuneExperiment, LmEvalExperiment
from attnbench.plan.grid_window import GridWindow, read_window, start_grid, windows_of
from attnbench.plan.protocol import Protocol, Tuning
from attnbench.plan.scaling_spec import ScalingExperiment
from attnbench.plan.speed_spec import SpeedExperiment

FLOAT_SETTINGS = [k for k, f in TrainSpec.model_fields.items() if f.annotation is float]  # what a window can search


class TrainExperiment(ExperimentBase):
    kind: Literal["train"]
    """train: train every variant to an equal budget and evaluate it on held-out data."""
    data: DataSpec = DataSpec()
    """The training data (see Data); defaults.data fills what it leaves out."""
    train: TrainSpec
    """Training settings (see Training settings); defaults.train fills what it leaves out."""
    grid: dict[str, list[Any] | GridWindow] = {}
    """Train settings (or variant_options.VARIANT.OPTION) to sweep: {key: [values]}, every point runs; or a float
    setting's search window, searched by protocol.tuning: {lr: {start: [...], factor: F, bounds: [lo, hi]}}. {}: one
    point."""
    protocol: Protocol | None = None
    """The fair-comparison protocol: each variant's point chosen on validation, decisions on the test split (see
    Protocol). None: every point is reported, with no decisions."""
    battery: str | None = Field(None, min_length=1)
    """A capability battery's tier (e.g. cpu): the task experiments tagged with it get one battery score per variant.
    None: not part of a battery."""

    def points(self) -> list[dict[str, Any]]:
        """The grid's points; a window's start points (tuning adds the rest as it goes)."""
        return grid_points(start_grid(self.grid))

    def windows(self) -> dict[str, GridWindow]:
        return windows_of(self.grid)

    def spec(self) -> TrainSpec:
        return self.train

    @field_validator("battery")
    @classmethod
    def _battery_scores_tasks(cls, battery: str | None, info: ValidationInfo) -> str | None:
        data = info.data.get("data")
        if battery is not None and isinstance(data, DataSpec) and data.source != "task":
            raise ValueError(
                f"battery {quoted(battery)} tags task experiments (data.source: task), whose answers a battery "
                f"scores; this experiment's data is {data.source!r} text, which no battery can score. Remove "
                "battery here (or, set in defaults, move it to the task experiments)"
            )
        return battery

    def context(self, spec: BaseModel) -> int:
        return spec_as(spec, TrainSpec, self.name).seq_len

    @field_validator("grid", mode="before")
    @classmethod
    def _windows_read(cls, grid: Any, info: ValidationInfo) -> Any:
        """A mapping under a grid key is a search window: checked here, so its error names the
        experiment and the key in one line (not once per member of the list-or-window union)."""
        if not isinstance(grid, dict):
            return grid
        name = info.data.get("name")
        return {k: read_window(v, name, k) if isinstance(v, dict) else v for k, v in grid.items()}

    @field_validator("grid")
    @classmethod
    def _grid_keys(
        cls, grid: dict[str, list[Any] | GridWindow], info: ValidationInfo
    ) -> dict[str, list[Any] | GridWindow]:
        known = set(TrainSpec.model_fields) - {"budget"}
        for key, values in grid.items():
            opt = option_key(key)
            if opt is not None and not (opt[0] and opt[1] and "." not in opt[1]):
                raise ValueError(
                    f"grid key {quoted(key)}: write a variant's option as variant_options.VARIANT.OPTION "
                    "(e.g. variant_options.linear.feature_map)"
                )
            if opt is None and key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"grid key {quoted(key)} is not a train setting{hint}; allowed: {sorted(known)}, "
                    "or variant_options.VARIANT.OPTION"
                )
            if isinstance(values, list) and not values:
                raise ValueError(f"grid key {quoted(key)} has no values")
            if isinstance(values, GridWindow) and key not in FLOAT_SETTINGS:
                raise ValueError(
                    f"experiment {quoted(info.data.get('name'))}: grid key {quoted(key)} is a search window, which "
                    f"multiplies by its factor, so it searches a float train setting ({', '.join(FLOAT_SETTINGS)}); "
                    f"list the values of {quoted(key)} instead"
                )
        return grid

    @model_validator(mode="after")
    def _grid_points_valid(self) -> TrainExperiment:
        for key in self.grid:
            opt = option_key(key)
            if opt is not None and isinstance(self.variants, list) and opt[0] not in self.variants:
                raise ValueError(
                    f"grid key {quoted(key)} sweeps an option of {quoted(opt[0])}, which this experiment "
                    f"does not run (variants: {quoted(self.variants)}); add it to 'variants' or correct the key"
                )
        for point in grid_points(start_grid(self.grid)):
            TrainSpec.model_validate(
                {**self.train.model_dump(), **{k: v for k, v in point.items() if option_key(k) is None}}
            )
        for key, window in self.windows().items():  # every point searched lies within the bounds
            for bound in window.bounds:
                TrainSpec.model_validate({**self.train.model_dump(), key: bound})
        return self

    @model_validator(mode="after")
    def _windows_searched(self) -> TrainExperiment:
        p, windows = self.protocol, self.windows()
        if windows and (p is None or p.tuning is None or not p.tune):
            raise ValueError(
                f"experiment {quoted(self.name)}: grid key {quoted(next(iter(windows)))} is a search window, "
                "which protocol.tuning searches; "
                "add protocol.tuning (e.g. tuning: {seeds: [0], budget: {steps: 200}}) or list the values"
            )
        return self

    def _replication_possible(self, fresh: list[int], p: Protocol) -> None:
        """Replication seeds must be fresh: none chose the point or decided the row."""
        used = set(self.seeds) | set(p.tuning.seeds if p.tuning is not None else [])
        if p.seeds is not None:
            used |= set(range(p.seeds.max))
        if used & set(fresh):
            suggestion = [max(used) + 1 + i for i in range(len(fresh))]
            raise ValueError(
                f"protocol.replicate {fresh} reuses seed(s) {sorted(used & set(fresh))} that train, tune or may "
                f"decide this experiment; give fresh seeds, e.g. replicate: {suggestion}"
            )
        if not p.interval:
            raise ValueError("protocol.replicate repeats decisions, and protocol.interval: false makes none; drop one")

    @model_validator(mode="after")
    def _protocol_possible(self) -> TrainExperiment:
        p = self.protocol
        if p is None:
            return self
        if p.seeds is not None:
            first = list(range(p.seeds.min))
            if "seeds" in self.model_fields_set and self.seeds != first:
                raise ValueError(
                    f"seeds {self.seeds} and protocol.seeds {{min: {p.seeds.min}, max: {p.seeds.max}}} are both "
                    "given; keep seeds: [...] for fixed seeds, or protocol.seeds to add seeds until decided"
                )
            self.seeds = first
        if p.tune and len(self.points()) < 2:
            raise ValueError(
                "protocol.tune needs a grid of at least 2 points to choose from (e.g. grid: "
                "{lr: [1.0e-3, 3.0e-3]}); add values to 'grid' or set protocol.tune: false"
            )
        if p.interval and len(set(self.seeds)) < 2:
            raise ValueError(
                f"protocol.interval needs at least 2 seeds, got seeds: {self.seeds}; "
                "give e.g. seeds: [0, 1] or set protocol.interval: false"
            )
        if not self.data.has_test():
            what = (
                "data.test_examples (e.g. 256)"
                if self.data.source == "task"
                else "data.test_fraction (e.g. 0.05) or data.test_path (a separate file)"
            )
            raise ValueError(f"protocol reports on a test split, and this experiment's data has none; set {what}")
        if isinstance(self.variants, list):
            for where, name in p.baseline_keys():
                if name not in self.variants:
                    raise ValueError(
                        f"{where} {quoted(name)} is not among this experiment's variants "
                        f"{quoted(self.variants)}; add it to 'variants' or name another baseline"
                    )
        if p.metric is None:  # a task is read by its answers, text by its loss
            p = self.protocol = p.model_copy(update={"metric": "accuracy" if self.data.source == "task" else "loss"})
        if p.metric == "accuracy" and self.data.source != "task":
            raise ValueError(
                "protocol.metric: accuracy reads a task's answers, and this experiment's data is "
                f"{self.data.source!r} text; use metric: loss or a task source"
            )
        if p.tuning is not None:
            self._tuning_possible(p, p.tuning)
        if p.replicate is not None:
            self._replication_possible(p.replicate, p)
        if p.learn_target is not None and p.metric == "accuracy" and p.learn_target > 1:
            raise ValueError(
                f"protocol.learn_target {p.learn_target} is an accuracy here (metric: accuracy), which is at most "
                "1.0; give e.g. 0.9, or set metric: loss for a loss target"
            )
        self._expectations_possible(p)
        return self

    def _expectations_possible(self, p: Protocol) -> None:
        for i, e in enumerate(p.expectations):
            for role, name in (("variant", e.variant), ("versus", e.versus)):
                if name is not None and isinstance(self.variants, list) and name not in self.variants:
                    raise ValueError(
                        f"protocol.expectations[{i}].{role} {quoted(name)} is not among this "
                        f"experiment's variants {quoted(self.variants)}"
                    )
            if e.trend is not None:
                self._trend_possible(i, e.trend, e.setting)
            if e.setting is not None and e.setting not in self.data.eval_settings:
                raise ValueError(
                    f"protocol.expectations[{i}].setting {e.setting} is not one of data.eval_settings "
                    f"{self.data.eval_settings}; name one of those"
                )

    def _trend_possible(self, i: int, trend: str, setting: dict[str, Any] | None) -> None:
        """A trend claim's setting is the hardest eval setting along its axis: the suggested fix is
        one of this experiment's own eval settings, so the next check accepts it."""
        along = [s for s in self.data.eval_settings if trend in s]
        if setting is not None and trend in setting:
            return
        if not along:
            keys = sorted({k for s in self.data.eval_settings for k in s})
            raise ValueError(
                f"protocol.expectations[{i}].trend {trend!r} is not a key of data.eval_settings (keys: {keys}); "
                "name one of those keys, or evaluate per setting of that axis"
            )
        hardest = max(along, key=lambda s: s[trend])
        raise ValueError(
            f"protocol.expectations[{i}].trend {trend!r} needs its setting at the hardest point of that axis, "
            f"one of data.eval_settings: e.g. setting: {hardest}; got setting {setting!r}"
        )

    def _tuning_possible(self, p: Protocol, t: Tuning) -> None:
        full = self.train.budget
        if t.budget.kind() != full.kind():
            raise ValueError(
                f"protocol.tuning.budget is in {t.budget.kind()} and train.budget in {full.kind()}; "
                "give both in the same unit"
            )
        if getattr(t.budget, t.budget.kind()) >= getattr(full, full.kind()):
            raise ValueError(
                f"protocol.tuning.budget ({t.budget.model_dump(exclude_none=True)}) must be smaller "
                f"than train.budget ({full.model_dump(exclude_none=True)}): tuning is the short run"
            )
        if not p.tune:
            raise ValueError("protocol.tuning searches the grid, and protocol.tune is false; remove one of them")
        if t is not None and t.criterion == "accuracy" and self.data.source != "task":
            raise ValueError(
                "protocol.tuning.criterion: accuracy reads a task's answers, and this experiment's data is "
                f"{self.data.source!r} text; use criterion: loss or a task source"
            )


# The union every suite experiment is validated against; new kinds are added here.
AnyExperiment = Annotated[
    TrainExperiment | SpeedExperiment | ScalingExperiment | LmEvalExperiment | FinetuneExperiment,
    Field(discriminator="kind"),
]
