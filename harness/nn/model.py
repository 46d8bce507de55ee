"""The language-model interface shared by the backbone and whole-model builders."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import AuxLoss
from attnbench.errors import PluginError

IGNORE_INDEX = -100  # target of positions that are not scored


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, T, V); (N, V) for the scored positions when a model skips ignored ones
    loss: torch.Tensor | None = None  # () cross-entropy + sum of weighted aux means
    ce: torch.Tensor | None = None  # () mean next-token cross-entropy, nats
    aux: dict[str, torch.Tensor] = field(default_factory=dict)  # unweighted aux means


class LanguageModel(nn.Module):
    """Base for anything the harness trains, evaluates or decodes.

    Subclasses implement ``forward(idx, targets=None) -> ModelOutput`` and, for
    incremental decoding, ``init_state`` and ``step`` with explicit state values.
    """

    config: ModelConfig

    def init_state(
        self,
        batch_size: int,
        max_len: int,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no incremental decoding")

    def step(self, idx: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """idx (B, t) next tokens -> logits (B, t, V) and the new state."""
        raise NotImplementedError(f"{type(self).__name__} has no incremental decoding")

    def length_limit(self) -> tuple[int, str] | None:
        """The longest sequence this model runs and why, or None for any length. A variant's
        own model is taken at its word: it was built for ``config.context``."""
        C = self.config.context
        return C, f"the variant's own model is built for context {C} and declares no longer length"

    def num_params(self) -> int:
        """Parameters counted once (tied weights are shared tensors)."""
        return sum(p.numel() for p in self.parameters())


def as_language_model(model: object, variant: str) -> LanguageModel:
    """A variant's own model (what ``build_model`` returned; the contract names it by a protocol)
    as the ``LanguageModel`` the harness runs; PluginError when it is something else."""
    if not isinstance(model, LanguageModel):
        raise PluginError(
            f"variant {variant!r}: build_model(config) returned {type(model).__name__}, not an "
            "attnbench.LanguageModel; make the variant's own model a subclass of LanguageModel"
        )
    return model


def lm_loss(logits: torch.Tensor, targets: torch.Tensor | None, aux: Iterable[AuxLoss] = ()) -> ModelOutput:
    """Cross-entropy (fp32, ignore_index -100) plus weighted means of auxiliary losses."""
    if targets is None:
        return ModelOutput(logits)
    ce = F.cross_entropy(  # () upcast: log-softmax over the vocabulary in fp32
        logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )
    by_name: dict[str, list[AuxLoss]] = {}
    for a in aux:
        by_name.setdefault(a.name, []).append(a)
    loss = ce
    means: dict[str, torch.Tensor] = {}
    for name, items in by_name.items():
        mean = torch.stack([a.value.float() for a in items]).mean()  # () mean over layers
        means[name] = mean
        loss = loss + items[0].weight * mean
    return ModelOutput(logits, loss, ce, means)
