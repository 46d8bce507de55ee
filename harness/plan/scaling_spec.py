"""What a ``kind: scaling`` experiment accepts: the model sizes (at least
MIN_SCALING_SIZES), the budget rule that sets each size's budget from its parameter count,
and the margin the exponent comparison uses (run by attnbench.experiments.scaling)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from attnbench.data.spec import DataSpec
from attnbench.plan.base import Budget, ExperimentBase, TrainSpec, spec_as

MIN_SCALING_SIZES = 4  # 3 sizes and 3 parameters interpolate exactly: no residual, no interval, no test


class ScalingSpec(TrainSpec):
    """Training settings of a `scaling` experiment (harness/scaling.py): as `train`, but
    each size's budget follows its measured parameter count N, from exactly one of
    ``tokens_per_param`` (tokens = k N) or ``flops_per_param`` (training FLOPs = k N)."""

    budget: Budget | None = None
    """Set per model size from tokens_per_param or flops_per_param; do not give it."""
    tokens_per_param: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Each size trains on this many tokens per parameter (give this or flops_per_param)."""
    flops_per_param: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Each size trains on this many training FLOPs per parameter (give this or tokens_per_param)."""
    exponent_margin: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Exponents b within this margin of the baseline's read "scales like <baseline>". None: only "steeper" /
    "shallower" where the interval of the difference excludes 0, else "undetermined"."""

    @field_validator("tokens_per_param", "flops_per_param", "exponent_margin", mode="before")
    @classmethod
    def _no_bools(cls, raw: Any) -> Any:
        """YAML's true/false are not numbers here (pydantic would read true as 1.0)."""
        if isinstance(raw, bool):
            raise ValueError(f"{raw!r} is not a number; give a finite positive number (e.g. 20)")
        return raw

    @model_validator(mode="after")
    def _one_rule(self) -> ScalingSpec:
        if self.budget is not None:
            raise ValueError(
                "a scaling experiment sets each size's budget; remove 'budget' and "
                "give tokens_per_param or flops_per_param"
            )
        given = list(self.budget_rule())
        if len(given) != 1:
            raise ValueError(f"give exactly one of tokens_per_param, flops_per_param (got {given or 'none'})")
        return self

    def budget_rule(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("tokens_per_param", "flops_per_param") if getattr(self, k) is not None}

    def train_spec(self, n_params: int) -> TrainSpec:
        """The TrainSpec of a model with ``n_params`` parameters."""
        fields = self.model_dump(exclude={"budget", "tokens_per_param", "flops_per_param", "exponent_margin"})
        if self.tokens_per_param is not None:
            budget = {"tokens": max(1, math.ceil(self.tokens_per_param * n_params))}
        elif self.flops_per_param is not None:
            budget = {"flops": self.flops_per_param * n_params}
        else:  # the validator asks for exactly one of the two
            raise ValueError("scaling needs tokens_per_param or flops_per_param")
        return TrainSpec.model_validate({**fields, "budget": budget})


class ScalingExperiment(ExperimentBase):
    kind: Literal["scaling"]
    """scaling: train every variant at several model sizes and fit loss against size with a power law."""
    data: DataSpec = DataSpec()
    """The training data (see Data); defaults.data fills what it leaves out."""
    scaling: ScalingSpec
    """The scaling settings (see Scaling settings)."""

    def spec(self) -> ScalingSpec:
        return self.scaling

    def context(self, spec: BaseModel) -> int:
        return spec_as(spec, ScalingSpec, self.name).seq_len

    @model_validator(mode="after")
    def _enough_sizes(self) -> ScalingExperiment:
        sizes = {m.model_dump_json() for m in self.models}
        if len(sizes) < MIN_SCALING_SIZES:
            raise ValueError(
                f"a scaling fit needs at least {MIN_SCALING_SIZES} different model sizes in 'models', got "
                f"{len(sizes)} (a law with 3 parameters through 3 sizes interpolates them: too few to fit); "
                "add sizes spanning a decade of parameters"
            )
        return self
