"""Answer tokens the base model barely saw in training.

A fine-tuning target that scores tokens (nearly) absent from the base model's training
data asks the model to emit outputs whose rows of the tied embedding were never trained.
With the embedding frozen (LoRA), no adapter can fix that: the tuned model stays near
chance whatever the rank (measured: Tiny Shakespeare has no digits, and LoRA tuning to
digit recall stayed at loss 4.87 for every variant and rank). The cell records these
tokens and the report flags them, so the result is not read as the variant's fault.
"""

from __future__ import annotations

from typing import Any

import torch

from attnbench.contract.task import IGNORE

RARE_FRACTION = 1e-5  # a token below this share of the base training tokens counts as unseen


def _training_tokens(data: Any) -> torch.Tensor:
    """(N,) the token ids a model is trained on: a corpus's train split, a task's inputs."""
    tokens = data.train if hasattr(data, "train") else data.train_inputs
    return tokens.reshape(-1).long()  # (N,)


def _scored_tokens(data: Any) -> torch.Tensor:
    """The distinct token ids a fine-tune is scored on: a task's answers, a corpus's tokens."""
    if hasattr(data, "train_targets"):
        targets = data.train_targets.reshape(-1)  # (N * T,)
        return torch.unique(targets[targets != IGNORE].long())
    return torch.unique(_training_tokens(data))


def unseen_answer_tokens(base: Any, tuned: Any) -> list[int]:
    """Ids the fine-tune scores that make up less than RARE_FRACTION of the base model's
    training tokens (absent ones included), in increasing order."""
    seen = _training_tokens(base)  # (N,)
    counts = torch.bincount(seen, minlength=max(base.vocab_size, tuned.vocab_size))  # (V,)
    scored = _scored_tokens(tuned)  # (K,)
    rare = counts[scored] < RARE_FRACTION * len(seen)  # (K,)
    return scored[rare].tolist()
