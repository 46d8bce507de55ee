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

The data and the evaluation live in ``attnbench.plugins.tasks.digits_data``, the options and the
layout in ``digits_options``; this module registers the task without importing torch, numpy or
scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl
from attnbench.plugins.tasks.digits_options import LEVELS, PIXELS, DigitsOptions

if TYPE_CHECKING:
    from attnbench import LanguageModel, TaskBatch, TaskEval


def _vocab(options: DigitsOptions) -> int:
    return LEVELS + 1


def _seq_len(options: DigitsOptions) -> int:
    return PIXELS


def _coords(options: DigitsOptions) -> dict[str, Any]:
    return {"subset": options.subset, "visible_rows": options.visible_rows}


def _generate_digits(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.digits_data import generate_digits  # torch, numpy and scikit-learn load with the data

    return generate_digits(options, n, seed)


def _evaluate_digits(model: LanguageModel, options: Any, device: Any, seed: int) -> list[TaskEval]:
    from attnbench.plugins.tasks.digits_data import evaluate_digits

    return evaluate_digits(model, options, device, seed)


@hookimpl
def attnbench_register_tasks(register) -> None:
    register(
        Task(
            "digits",
            DigitsOptions,
            _generate_digits,
            _vocab,
            _seq_len,
            description="8x8 digits as pixel sequences; complete the occluded lower half, classify it",
            evaluate=_evaluate_digits,
            coords=_coords,
            version="1",
            # All null predictors (per-pixel accuracy): the majority level at each pixel, the most
            # frequent level so far, copying a fixed pixel or offset (the pixel before or above)
            # are rules without a model of the digits; the position majority wins (~0.52).
            null_predictors=None,
        )
    )
