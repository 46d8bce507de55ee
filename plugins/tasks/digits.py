"""Occluded-digit completion: scikit-learn's bundled 8x8 digits as pixel sequences.

Tokens: pixel intensities 0..16 are tokens 0..16; token 17 is BOS (vocabulary 18). An
image is read row by row (64 pixels, no label anywhere in the sequence), so one example is

    inputs  = [BOS, p0, ..., p62]   (64,)  targets = [p0, ..., p63]   (64,)

and every pixel is scored: the model learns the images autoregressively. The 1797 images
are split once, by ``split_seed``, into a train part (``train_fraction``) and a held-out
part; ``generate(options, n, seed)`` draws n images of ``options.subset`` (cycling through
fresh seed-shuffled orders when n exceeds the part, so 20k training examples repeat the
~1437 training digits ~14 times).

``evaluate(model, options, device, seed)`` (the efficient-attention seed's experiment):
for the held-out digits, feed ``[BOS] + the first 8 * visible_rows pixels`` through
``model.step`` and let the model complete the remaining pixels with its incremental
decoding (greedy at temperature 0, else sampled over the 17 pixel tokens with a CPU
generator seeded by ``seed``). A logistic-regression classifier trained on the real
training digits then scores the completed images ("completion_accuracy"), the real
held-out images ("reference_accuracy": the ceiling) and the images with the hidden rows
blank ("occluded_accuracy") or filled with the mean training image ("mean_fill_accuracy"):
two floors a completion should beat, since the visible rows alone carry some of the class.
"completion_ms_per_image" is the wall-clock of the batched completion (all images decoded
together, device synchronised) divided by the image count. Chance is ~0.1; note that an
untrained model that *samples* noise into the hidden rows can score well above the blank
floor (noise looks less unlike a digit than blank rows), so compare against both floors.

The data and the evaluation live in ``attnbench.plugins.tasks.digits_data``; this module holds the
options and the layout and registers the task without importing torch, numpy or scikit-learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl

if TYPE_CHECKING:
    pass


DATA = "attnbench.plugins.tasks.digits_data"  # torch: imported when the first batch is made

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


def _vocab(options: DigitsOptions) -> int:
    return LEVELS + 1


def _seq_len(options: DigitsOptions) -> int:
    return PIXELS


def _coords(options: DigitsOptions) -> dict[str, Any]:
    return {"subset": options.subset, "visible_rows": options.visible_rows}


@hookimpl
def attnbench_register_tasks(register) -> None:
    register(
        Task(
            "digits",
            DigitsOptions,
            f"{DATA}:generate_digits",
            _vocab,
            _seq_len,
            description="8x8 digits as pixel sequences; complete the occluded lower half, classify it",
            evaluate=f"{DATA}:evaluate_digits",
            coords=_coords,
            version="1",
            # All null predictors (per-pixel accuracy): the majority level at each pixel, the most
            # frequent level so far, copying a fixed pixel or offset (the pixel before or above)
            # are rules without a model of the digits; the position majority wins (~0.52).
            null_predictors=None,
        )
    )
