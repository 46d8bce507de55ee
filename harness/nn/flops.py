"""Per-model facts: measured parameters, declared state size and analytic FLOPs."""

from __future__ import annotations

from typing import Any

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant


def backbone_flops_per_token(config: ModelConfig) -> float:
    """Forward FLOPs per token outside the mixers: MLPs (2 matmuls; none when ``mlp`` is False) and the LM head."""
    d, h = config.d_model, config.mlp_width
    return config.n_layer * 2.0 * (2 * d * h) + 2.0 * d * config.vocab_size


def model_facts(variant: Variant, config: ModelConfig, T: int, n_params: int | None = None) -> dict[str, Any]:
    """Facts for the shared backbone with this variant's mixers at context T.

    ``state_elements`` and ``mixer_flops_per_token`` are None when the variant does not
    declare them; ``train_flops_per_token`` uses the usual forward+backward = 3x forward.
    """
    layers = range(config.n_layer)
    state = sum(variant.state_size(config, i, T) for i in layers) if variant.state_size else None
    mixer = sum(variant.flops_per_token(config, i, T) for i in layers) if variant.flops_per_token else None
    fwd = None if mixer is None else mixer + backbone_flops_per_token(config)
    return {
        "n_params": n_params,
        "state_elements": state,
        "mixer_flops_per_token": mixer,
        "fwd_flops_per_token": fwd,
        "train_flops_per_token": None if fwd is None else 3.0 * fwd,
        "context": T,
    }
