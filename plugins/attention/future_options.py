"""Options of future attention, free of torch: the registration (``future``) sizes the
layers with them and the layer (``future_model``) reads them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from attnbench import ModelConfig

AUX_NAME = "future_attn"
DEFAULT_FUTURE_DIM = 50  # the published run's future_dim (variants.md 6.7)


@dataclass(frozen=True)
class FutureOptions:
    """Knobs of future attention (reference names in brackets).

    future_dim: learned future slots per row [future_dim]; in [1, context - 1], checked
        when the model is built. None (default) means min(50, context - 1): 50 as in the
        published run; the reference's default, context - 1, makes the band as wide as
        the causal part.
    start_layer, end_layer: 1-indexed, inclusive range of future layers; end_layer None
        means the last layer. Other layers are plain causal softmax attention.
    loss_type: "mse" or "cosine" [future_attn_loss_type MSE / COSINE].
    loss_coeff: weight of the layer-averaged auxiliary loss, > 0 [future_attn_loss_coeff].
    detach_target: stop gradients through the true-attention target
        [detach_future_ground_truth].
    use_future_attn_loss: add the auxiliary loss in training [use_future_attn_loss].
    """

    future_dim: int | None = None
    start_layer: int = 1
    end_layer: int | None = None
    loss_type: Literal["mse", "cosine"] = "mse"
    loss_coeff: float = 1.0
    detach_target: bool = True
    use_future_attn_loss: bool = True

    def __post_init__(self) -> None:
        for name in ("future_dim", "start_layer"):
            value = getattr(self, name)
            if value is None and name == "future_dim":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        end = self.end_layer
        if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < self.start_layer):
            raise ValueError(f"end_layer must be None or an integer >= start_layer ({self.start_layer}), got {end!r}")
        if self.loss_type not in ("mse", "cosine"):
            raise ValueError(f"loss_type must be 'mse' or 'cosine', got {self.loss_type!r}")
        coeff = self.loss_coeff
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 < coeff < math.inf:
            raise ValueError(f"loss_coeff must be a finite number > 0, got {coeff!r}")
        for name in ("detach_target", "use_future_attn_loss"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def fd(self) -> int:
        """future_dim once resolved (``checked`` resolves it; the mixer holds checked options)."""
        if self.future_dim is None:
            raise ValueError("future_dim is not resolved yet: use FutureOptions.checked(config)")
        return self.future_dim

    def checked(self, config: ModelConfig) -> FutureOptions:
        """These options validated against the model shape, future_dim resolved; raises
        ValueError."""
        if self.future_dim is None:
            fd = min(DEFAULT_FUTURE_DIM, config.context - 1)
            return dataclasses.replace(self, future_dim=fd).checked(config)
        if not 1 <= self.future_dim <= config.context - 1:
            raise ValueError(
                f"future_dim must be in [1, context - 1] = [1, {config.context - 1}], got {self.future_dim}"
            )
        if max(self.start_layer, self.end_layer or 1) > config.n_layer:
            raise ValueError(
                f"start_layer/end_layer ({self.start_layer}, {self.end_layer}) must be within "
                f"1..n_layer = 1..{config.n_layer}"
            )
        return self

    def is_future_layer(self, layer_idx: int, n_layer: int) -> bool:
        """layer_idx is 0-based; the range is 1-based inclusive."""
        return self.start_layer <= layer_idx + 1 <= (self.end_layer or n_layer)


def options_of(config: ModelConfig) -> FutureOptions:
    """The config's options checked against its shape, future_dim resolved; raises ValueError."""
    opts = config.options if config.options is not None else FutureOptions()
    if not isinstance(opts, FutureOptions):
        raise ValueError(f"config.options must be FutureOptions, got {type(opts).__name__}")
    return opts.checked(config)
