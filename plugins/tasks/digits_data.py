"""The occluded-digit task's data and evaluation (registered by ``attnbench.plugins.tasks.digits``,
which names this module and holds the options and the layout; imported on first use):
the images from scikit-learn, the seeded split, the generator, the model's completion of the
hidden rows and the reference classifier that scores it.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import torch

from attnbench import AttnbenchError, LanguageModel, TaskBatch, TaskEval
from attnbench.plugins.tasks.digits import BOS, LEVELS, PIXELS, SIDE, DigitsOptions, check_int


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 images (N, 64) int64 levels 0..16 and labels (N,) int64, read offline."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    return torch.from_numpy(np.asarray(images, dtype=np.int64)), torch.from_numpy(np.asarray(labels, dtype=np.int64))


@functools.lru_cache(maxsize=8)
def _split(train_fraction: float, split_seed: int) -> dict[str, torch.Tensor]:
    """Image indices of each subset: a seeded permutation cut at train_fraction."""
    n = len(_digits()[1])
    gen = torch.Generator(device="cpu")
    gen.manual_seed(split_seed)
    perm = torch.randperm(n, generator=gen)  # (N,)
    cut = int(round(train_fraction * n))
    return {"train": perm[:cut], "heldout": perm[cut:]}


def subset_images(options: DigitsOptions, subset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, 64) int64 pixel levels and (M,) labels of a subset, in split order."""
    images, labels = _digits()
    idx = _split(float(options.train_fraction), options.split_seed)[subset]  # (M,)
    return images[idx], labels[idx]


def generate_digits(options: DigitsOptions, n: int, seed: int) -> TaskBatch:
    check_int("n (number of examples)", n, 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    images, _ = subset_images(options, options.subset)  # (M, 64)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    rounds = -(-n // len(images))  # ceil: whole shuffled passes over the subset
    passes = [torch.randperm(len(images), generator=gen) for _ in range(rounds)]  # rounds x (M,)
    order = torch.cat([torch.empty(0, dtype=torch.long), *passes])[:n]  # (n,)
    pix = images[order]  # (n, 64)
    bos = torch.full((n, 1), BOS, dtype=torch.long)  # (n, 1)
    return TaskBatch(torch.cat([bos, pix[:, :-1]], dim=1), pix.clone())  # (n, 64), (n, 64)


@functools.lru_cache(maxsize=8)
def _classifier(train_fraction: float, split_seed: int):
    """Logistic regression on the real training digits (intensities / 16), fixed seed."""
    from sklearn.linear_model import LogisticRegression

    images, labels = subset_images(DigitsOptions(train_fraction=train_fraction, split_seed=split_seed), "train")
    clf = LogisticRegression(max_iter=5000, random_state=0)
    return clf.fit(images.numpy() / 16.0, labels.numpy())


def classifier_accuracy(options: DigitsOptions, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Accuracy of the reference classifier on (M, 64) pixel levels in [0, 16]."""
    clf = _classifier(float(options.train_fraction), options.split_seed)
    pred = clf.predict(images.cpu().numpy() / 16.0)  # (M,)
    return float((pred == labels.cpu().numpy()).mean())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def complete(
    model: LanguageModel, prompt: torch.Tensor, hidden: int, temperature: float, gen: torch.Generator
) -> torch.Tensor:
    """prompt (B, P) = [BOS, visible pixels] -> (B, hidden) completed pixel levels, by the
    model's incremental decoding: the prompt in one ``step``, then one pixel per ``step``
    (the last pixel is never fed back, so the state holds P + hidden - 1 = 64 positions)."""
    B = prompt.size(0)
    try:
        state = model.init_state(B, prompt.size(1) + hidden - 1, device=prompt.device)
    except NotImplementedError as exc:
        raise AttnbenchError(
            f"the digits completion needs incremental decoding (init_state/step), but {exc}; "
            "evaluate this task with a variant that decodes, or drop task 'digits' for it"
        ) from None
    logits, state = model.step(prompt, state)  # (B, P, V)
    out = []
    for i in range(hidden):
        last = logits[:, -1, :LEVELS].float()  # (B, 17) pixel tokens only: BOS is never a pixel
        if temperature == 0.0:
            nxt = last.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            # Softmax in fp32 and sampling on the CPU generator: reproducible on any device.
            probs = torch.softmax(last / temperature, dim=-1).cpu()  # (B, 17)
            nxt = torch.multinomial(probs, 1, generator=gen).to(prompt.device)  # (B, 1)
        out.append(nxt)
        if i + 1 < hidden:
            logits, state = model.step(nxt, state)  # (B, 1, V)
    return torch.cat(out, dim=1)  # (B, hidden)


def evaluate_digits(model: LanguageModel, options: DigitsOptions, device: Any, seed: int) -> list[TaskEval]:
    """Complete the held-out digits' hidden rows; rows as documented in the module."""
    device = torch.device(device)
    images, labels = subset_images(options, "heldout")  # (M, 64), (M,)
    if options.eval_images:
        images, labels = images[: options.eval_images], labels[: options.eval_images]
    visible = SIDE * options.visible_rows
    bos = torch.full((len(images), 1), BOS, dtype=torch.long)  # (M, 1)
    prompt = torch.cat([bos, images[:, :visible]], dim=1).to(device)  # (M, 1 + visible)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        _sync(device)
        start = time.perf_counter()
        lower = complete(model, prompt, PIXELS - visible, float(options.temperature), gen)  # (M, hidden)
        _sync(device)
        elapsed = time.perf_counter() - start
    finally:
        model.train(was_training)
    completed = torch.cat([images[:, :visible], lower.cpu()], dim=1)  # (M, 64)
    occluded = images.clone()  # (M, 64)
    occluded[:, visible:] = 0  # hidden rows blank (background level 0)
    mean_fill = images.double()  # (M, 64)
    mean_fill[:, visible:] = subset_images(options, "train")[0].double().mean(dim=0)[visible:]  # (M, hidden)
    tags = {
        "subset": "heldout",
        "images": len(images),
        "visible_rows": options.visible_rows,
        "decode": "greedy" if options.temperature == 0 else f"sampled(T={options.temperature})",
    }
    return [
        TaskEval("completion_accuracy", classifier_accuracy(options, completed, labels), "", dict(tags)),
        TaskEval("reference_accuracy", classifier_accuracy(options, images, labels), "", dict(tags)),
        TaskEval("occluded_accuracy", classifier_accuracy(options, occluded, labels), "", dict(tags)),
        TaskEval("mean_fill_accuracy", classifier_accuracy(options, mean_fill, labels), "", dict(tags)),
        # Batched wall-clock (all images decoded together) divided by the image count.
        TaskEval("completion_ms_per_image", 1e3 * elapsed / max(1, len(images)), "ms", {**tags, "batch": len(images)}),
    ]
