"""What each layer and head of a trained model attends to, for ``attnbench inspect``.

A variant exposes ``Variant.attention_maps(mixer, x)``; here each layer's mixer input is
captured with a forward pre-hook during one forward pass of the text, and the variant's
function turns it into pairwise weights (H, T, T) or per-token importances (H, T).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnbench.contract.config import ModelConfig
from attnbench.data.tokenizers import ByteTokenizer
from attnbench.errors import InspectError
from attnbench.nn.checkpoint import CheckpointMeta, load_checkpoint

MAX_TOKENS = 256  # beyond this a T x T heatmap is unreadable and the JSON large


@dataclass
class LayerMap:
    layer: int
    kind: str  # "pairwise" (H, T, T) or "importance" (H, T)
    weights: np.ndarray


@dataclass
class Inspection:
    variant: str
    checkpoint: CheckpointMeta
    tokens: list[str]  # one printable label per position
    layers: list[LayerMap]

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "checkpoint": self.checkpoint.path,
            "cell_key": self.checkpoint.cell_key,
            "tokens": self.tokens,
            "layers": [{"layer": m.layer, "kind": m.kind, "heads": m.weights.round(6).tolist()} for m in self.layers],
        }


def token_labels(ids: list[int]) -> list[str]:
    """Byte tokens as short printable labels (space as '␣', newline as '\\n')."""
    special = {32: "␣", 10: "\\n", 9: "\\t"}
    return [special.get(i, chr(i) if 33 <= i < 127 else f"x{i:02x}") for i in ids]


def _mixers(model: nn.Module, variant: Any, config: ModelConfig) -> list[nn.Module]:
    """The model's token mixers in layer order: modules of the classes the variant builds."""
    classes = {type(variant.build_mixer(config, i)) for i in range(config.n_layer)}
    return [m for m in model.modules() if type(m) in classes]


def _encode(text: str | None, tokens: list[int] | None, config: ModelConfig) -> tuple[torch.Tensor, list[str]]:
    """(1, T) input ids and their axis labels: ``text`` as bytes (a byte-level model), or
    ``tokens`` as given (any vocabulary, e.g. an MQAR task model), labelled by id."""
    if (text is None) == (tokens is None):
        raise InspectError("give either --text (bytes, for byte-level models) or --tokens (token ids)")
    if text is not None:
        if config.vocab_size != ByteTokenizer.vocab_size:
            raise InspectError(
                f"the checkpoint's vocabulary has {config.vocab_size} tokens; --text is read "
                "as bytes and needs a byte-level model (vocabulary 256); give --tokens "
                "(space-separated token ids) instead"
            )
        if not text:
            raise InspectError(
                f"--text is empty; give the text to look at (1 to {min(MAX_TOKENS, config.context)} "
                "bytes, e.g. --text 'the cat sat')"
            )
        ids = ByteTokenizer().encode(text).long()  # (T,)
        what, labels = f"--text is {len(ids)} bytes", token_labels(ids.tolist())
    elif tokens is not None:
        bad = [t for t in tokens if not 0 <= t < config.vocab_size]
        if bad:
            raise InspectError(
                f"--tokens has ids {bad[:5]} outside the checkpoint's vocabulary (0..{config.vocab_size - 1})"
            )
        ids = torch.tensor(tokens, dtype=torch.long)  # (T,)
        what, labels = f"--tokens has {len(ids)} ids", [str(t) for t in tokens]
    if not 1 <= len(ids) <= min(MAX_TOKENS, config.context):
        raise InspectError(
            f"{what}; give 1 to {min(MAX_TOKENS, config.context)} (the model's context is {config.context})"
        )
    return ids[None, :], labels  # (1, T)


def inspect_checkpoint(
    path: str | Path, text: str | None, registry: Any, tokens: list[int] | None = None
) -> Inspection:
    """Attention maps of every layer of the checkpoint's model on ``text`` (bytes) or on
    ``tokens`` (ids).

    Raises InspectError when the variant has no ``attention_maps`` or the text does not fit,
    CheckpointError when the file is not a readable attnbench checkpoint."""
    model, meta = load_checkpoint(path, registry)
    variant = registry.get(meta.variant)
    if variant.attention_maps is None:
        raise InspectError(
            f"variant {meta.variant!r} has no attention maps: its plugin does not pass "
            "attention_maps=... to Variant(...) (see attnbench.contract.variant)"
        )
    config = model.config
    mixers = _mixers(model, variant, config)
    if len(mixers) != config.n_layer:
        raise InspectError(
            f"found {len(mixers)} token mixers for {config.n_layer} layers in this "
            f"{meta.model_kind} model of {meta.variant!r}; inspect needs the modules "
            "the variant's build_mixer makes (use model_kind: backbone)"
        )
    idx, labels = _encode(text, tokens, config)  # (1, T)
    inputs: list[torch.Tensor] = []
    hooks = [m.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for m in mixers]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    layers = []
    for i, (mixer, x) in enumerate(zip(mixers, inputs, strict=True)):
        w = variant.attention_maps(mixer, x)[0].float()  # (H, T, T) or (H, T)
        T = idx.size(1)
        if w.shape not in ((config.n_head, T, T), (config.n_head, T)):
            raise InspectError(
                f"variant {meta.variant!r}: attention_maps returned shape "
                f"{tuple(w.shape)} for layer {i}; expected (B, H, T, T) or (B, H, T)"
            )
        layers.append(LayerMap(i, "pairwise" if w.dim() == 3 else "importance", w.numpy()))
    return Inspection(meta.variant, meta, labels, layers)
