"""Options of the occluded-digits task (``digits``) and its image layout, free of torch: the
registration registers them, the data and evaluation (``digits_data``) read them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

LEVELS = 17  # pixel tokens 0..16 (scikit-learn's intensity levels)
BOS = LEVELS  # token 17 starts every image
SIDE = 8
PIXELS = SIDE * SIDE
SUBSETS = ("train", "heldout")


@dataclass(frozen=True)
class DigitsOptions:
    """subset: which split ``generate`` draws from ("train" or "heldout"; evaluate always
    completes held-out digits); train_fraction / split_seed: the fixed train/held-out split;
    visible_rows: image rows shown before completion (4 = the upper half); temperature:
    0 for greedy completion, > 0 to sample; eval_images: held-out digits completed by
    ``evaluate`` (0 = all of them, 360 with the default split)."""

    subset: str = "train"
    train_fraction: float = 0.8
    split_seed: int = 0
    visible_rows: int = 4
    temperature: float = 0.0
    eval_images: int = 0

    def __post_init__(self) -> None:
        if self.subset not in SUBSETS:
            raise ValueError(f"subset must be one of {SUBSETS}, got {self.subset!r}")
        if (
            isinstance(self.train_fraction, bool)
            or not isinstance(self.train_fraction, (int, float))
            or not 0.1 <= self.train_fraction <= 0.95
        ):
            raise ValueError(f"train_fraction must be a number in [0.1, 0.95], got {self.train_fraction!r}")
        check_int("split_seed", self.split_seed, 0)
        check_int("visible_rows", self.visible_rows, 1)
        if self.visible_rows >= SIDE:
            raise ValueError(f"visible_rows must be < {SIDE} (at least one row to complete), got {self.visible_rows}")
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not (math.isfinite(self.temperature) and self.temperature >= 0)
        ):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        check_int("eval_images", self.eval_images, 0)


def check_int(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError unless value is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
