"""Experiment specifications: what each `kind` of suite experiment accepts.

Every experiment has the common fields of ``ExperimentBase``; its kind adds one mapping
named after it (``train:``, ...). The suite validates against the union of all kinds.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .data import DataSpec


class Budget(BaseModel):
    """How much training each cell gets; exactly one key."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: int | None = Field(None, gt=0)
    tokens: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _exactly_one(self) -> "Budget":
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of steps, tokens (got {given or 'none'})")
        return self


class TrainSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    budget: Budget
    batch_size: int = Field(8, gt=0)
    seq_len: int = Field(128, gt=0)
    lr: float = Field(1e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(20, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    grad_clip: float = Field(1.0, gt=0)
    eval_interval: int = Field(50, gt=0)
    eval_tokens: int = Field(16384, gt=0)
    log_interval: int = Field(10, gt=0)
    model_kind: Literal["backbone", "own"] = "backbone"
    checkpoint: bool = True


class ModelSpec(BaseModel):
    """Model size; `context` defaults to the training sequence length."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    d_model: int = Field(64, gt=0)
    n_layer: int = Field(2, gt=0)
    n_head: int = Field(2, gt=0)
    context: int | None = Field(None, gt=0)
    mlp_ratio: int = Field(4, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    bias: bool = True

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelSpec":
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        return self


class ExperimentBase(BaseModel):
    """Fields every experiment kind has: which variants, at which sizes, which seeds."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    variants: list[str] | Literal["all"] = "all"
    variant_options: dict[str, dict[str, Any]] = {}
    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec()], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)

    def spec(self) -> BaseModel:
        """The kind-specific mapping (e.g. ``train:`` of a train experiment)."""
        return getattr(self, self.kind)

    def points(self) -> list[dict[str, Any]]:
        """Hyper-parameter points; kinds without a grid have one empty point."""
        return [{}]

    def context(self, spec: BaseModel) -> int:
        """Model context when a model spec leaves it unset."""
        raise NotImplementedError


class TrainExperiment(ExperimentBase):
    kind: Literal["train"]
    data: DataSpec = DataSpec()
    train: TrainSpec
    grid: dict[str, list[Any]] = {}

    def points(self) -> list[dict[str, Any]]:
        return grid_points(self.grid)

    def context(self, spec: TrainSpec) -> int:
        return spec.seq_len

    @field_validator("grid")
    @classmethod
    def _grid_keys(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        known = set(TrainSpec.model_fields) - {"budget"}
        for key, values in grid.items():
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"grid key {key!r} is not a train setting{hint}; allowed: {sorted(known)}")
            if not values:
                raise ValueError(f"grid key {key!r} has no values")
        return grid

    @model_validator(mode="after")
    def _grid_points_valid(self) -> "Experiment":
        for point in grid_points(self.grid):
            TrainSpec.model_validate({**self.train.model_dump(), **point})
        return self


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of a grid, in key order; [{}] for an empty grid."""
    points: list[dict[str, Any]] = [{}]
    for key, values in grid.items():
        points = [{**p, key: v} for p in points for v in values]
    return points


# The union every suite experiment is validated against; new kinds are added here.
AnyExperiment = Annotated[Union[TrainExperiment], Field(discriminator="kind")]
