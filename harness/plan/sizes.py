"""Fair sizes: each variant's MLP width chosen so its parameter count is within a tolerance
of a reference variant's at the same model size (``models[].match_params``)."""

from __future__ import annotations

from typing import Any

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant

_COUNTS: dict[tuple[str, str], int] = {}


def count_params(variant: Variant, config: ModelConfig) -> int:
    """Parameters of the shared backbone with ``variant``'s mixers (built without memory on
    the meta device where the mixers allow it)."""
    key = (variant.name, repr(config))
    if key not in _COUNTS:
        import torch  # only a suite that matches parameter counts builds models while it expands

        from attnbench.nn.backbone import Backbone

        try:
            with torch.device("meta"):
                model = Backbone(config, variant.build_mixer)
        except Exception:  # a mixer that computes at build time: build it for real
            model = Backbone(config, variant.build_mixer)
        _COUNTS[key] = sum(p.numel() for p in model.parameters())
    return _COUNTS[key]


def matched_config(
    variant: Variant, config: ModelConfig, reference: Variant, reference_options: Any, within: float
) -> ModelConfig:
    """``config`` with the MLP width that brings ``variant`` within ``within`` (relative) of the
    reference's parameter count; unchanged when it already is. Raises ValueError when no
    MLP width can (the mixers alone differ by more than the MLPs hold)."""
    target = count_params(reference, config.replace(options=reference_options))
    mine = count_params(variant, config)
    if abs(mine - target) <= within * target:
        return config
    per_unit = config.n_layer * (2 * config.d_model + (1 if config.bias else 0))  # params per MLP unit
    hidden = config.mlp_width + round((target - mine) / per_unit)
    if hidden < 1:
        raise ValueError(
            f"{variant.name!r} has {mine:,} parameters and {reference.name!r} {target:,}: no MLP "
            "width matches them; compare at a larger d_model or without match_params"
        )
    matched = config.replace(mlp_hidden=hidden)
    got = count_params(variant, matched)
    if abs(got - target) > within * target:
        raise ValueError(
            f"{variant.name!r} reaches {got:,} parameters at MLP width {hidden} against "
            f"{reference.name!r}'s {target:,}, outside {within:.0%}; raise params_within"
        )
    return matched
