"""A suite's ``defaults:``, typed: the keys the JSON Schema lists, each checked as its
experiment setting is, but every field optional (an experiment or an include may supply it).

``model``, ``data`` and ``train`` are merged under each experiment's own settings;
``variants``, ``seeds``, ``variant_options``, ``grid`` and ``battery`` are copied into
experiments that do not set them (plan/suite._apply_defaults). Any other key is refused.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from attnbench.data.spec import DataSpec
from attnbench.plan import base

MERGED: dict[str, type[BaseModel]] = {"model": base.ModelSpec, "data": DataSpec, "train": base.TrainSpec}
COPIED = ("variants", "seeds", "variant_options", "grid", "battery")


def partial(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` with every field optional (default None), each keeping its type and bounds;
    unknown keys still refused. Cross-field checks wait for the merged experiment."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        field = copy.copy(info)
        field.default, field.default_factory = None, None
        annotation: Any = info.annotation
        fields[name] = (annotation | None, field)
    config = ConfigDict(extra="forbid", frozen=True)
    return create_model(f"Partial{model.__name__}", __config__=config, __doc__=model.__doc__, **fields)


PartialModelSpec = partial(base.ModelSpec)
PartialDataSpec = partial(DataSpec)
PartialTrainSpec = partial(base.TrainSpec)


def _misplaced(key: str) -> str:
    """Where an unknown ``defaults`` key belongs, when it is a setting of model, data or train."""
    if key == "models":
        return (
            " (defaults.model is one size, merged into every experiment's models; "
            "give a list as models: under each experiment)"
        )
    homes = [section for section, model in MERGED.items() if key in model.model_fields]
    return f" (did you mean defaults.{homes[0]}.{key}?)" if homes else ""


class Defaults(BaseModel):
    """Settings merged under (model, data, train) or copied into (the rest) every experiment."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    model: PartialModelSpec | None = None  # type: ignore[valid-type]  (made by `partial`)
    """One model size, merged under each of every experiment's models (their own keys win)."""
    data: PartialDataSpec | None = None  # type: ignore[valid-type]
    """Data settings merged under every experiment's data (its own keys win)."""
    train: PartialTrainSpec | None = None  # type: ignore[valid-type]
    """Training settings merged under every experiment's train (its own keys win)."""
    variants: list[str] | Literal["all"] | None = None
    """Variants for every experiment that names none."""
    seeds: list[int] | None = Field(default=None, min_length=1)
    """Seeds for every experiment that gives none."""
    variant_options: dict[str, dict[str, Any]] | None = None
    """Variant options for every experiment that gives none."""
    grid: dict[str, list[Any]] | None = None
    """The grid of every train experiment that gives none."""
    battery: str | None = Field(default=None, min_length=1)
    """The battery tier of every train experiment that names none."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    raise ValueError(
                        f"{key!r} is not a defaults key{_misplaced(str(key))}; accepted: {', '.join(cls.model_fields)}"
                    )
        return data
