"""Model configuration passed whole to every builder (backbone, mixer, whole model)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

ACTIVATIONS = ("gelu", "gelu_tanh")
POSITIONS = ("learned", "none")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder-only language model; `options` holds the variant's own knobs.

    `options` is an instance of the variant's `options` dataclass (validated from the
    suite's `variant_options` mapping), or None for variants without options.
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    context: int = 256  # n_positions: longest sequence the learned positions cover
    mlp_ratio: int = 4
    dropout: float = 0.0
    bias: bool = True
    options: Any = field(default=None, compare=True)
    activation: str = "gelu"  # backbone MLP: "gelu" (exact erf) or "gelu_tanh" (HF GPT-2's gelu_new)
    mlp_hidden: int | None = None  # MLP width; None: mlp_ratio * d_model (set to match parameter counts)
    positions: str = "learned"  # backbone positions: "learned" (absolute, up to context) or "none" (NoPE)
    mlp: bool = True  # False: mixer-only blocks, no MLP (Zoology's recall models: state_mixer Identity)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layer", "n_head", "context", "mlp_ratio"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ValueError(f"ModelConfig.d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.mlp_hidden is not None and self.mlp_hidden <= 0:
            raise ValueError(f"ModelConfig.mlp_hidden must be positive, got {self.mlp_hidden}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"ModelConfig.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"ModelConfig.positions must be one of {POSITIONS}, got {self.positions!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def mlp_width(self) -> int:
        """Hidden units of each block's MLP; 0 for mixer-only blocks (``mlp`` False)."""
        if not self.mlp:
            return 0
        return self.mlp_ratio * self.d_model if self.mlp_hidden is None else self.mlp_hidden

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (options flattened to a dict) for content keys and the store."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "options"}
        if self.activation == "gelu":  # the default is left out: keys of earlier cells stay valid
            del out["activation"]
        if self.mlp_hidden is None:  # likewise
            del out["mlp_hidden"]
        if self.positions == "learned":  # likewise
            del out["positions"]
        if self.mlp:  # likewise
            del out["mlp"]
        opts = self.options
        if dataclasses.is_dataclass(opts) and not isinstance(opts, type):
            opts = dataclasses.asdict(opts)
        out["options"] = opts
        return out
