"""The configuration of an exported attnbench model (``model_type: attnbench``)."""

from __future__ import annotations

from typing import Any

from transformers.configuration_utils import PretrainedConfig


class AttnbenchConfig(PretrainedConfig):
    """variant / model_kind / attnbench_config rebuild the model through attnbench;
    ``provenance`` records the versions and source hashes of the code that trained it."""

    model_type = "attnbench"

    def __init__(
        self,
        variant: str = "softmax",
        model_kind: str = "backbone",
        attnbench_config: dict[str, Any] | None = None,
        plugin_distribution: str = "",
        provenance: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.variant = variant
        self.model_kind = model_kind
        self.attnbench_config = dict(attnbench_config or {})
        self.plugin_distribution = plugin_distribution
        self.provenance = dict(provenance or {})
        # Read by lm-eval and generate: the vocabulary and the longest sequence the model takes.
        self.vocab_size = int(self.attnbench_config.get("vocab_size", 256))
        self.max_position_embeddings = int(self.attnbench_config.get("context", 1024))
        kwargs.setdefault("tie_word_embeddings", False)  # attnbench ties inside its own modules
        super().__init__(**kwargs)
