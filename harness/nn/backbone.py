"""Shared GPT-2-style decoder that takes any variant's mixer.

Pre-norm blocks  x <- x + Drop(Mixer(LN1(x)));  x <- x + Drop(W2 GELU(W1 LN2(x)))  (the second
step left out with ``mlp: false``: mixer-only blocks, Zoology's recall models),
learned absolute positions (or none: ``positions: none``), final LayerNorm, LM head tied to the token embedding.
Init as GPT-2: N(0, 0.02), zero biases, residual projections N(0, 0.02 / sqrt(2 L)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import AuxLoss, MixerBuilder, MixerOutput, decoding
from attnbench.nn.model import IGNORE_INDEX, LanguageModel, ModelOutput, lm_loss

RESIDUAL_ATTR = "attnbench_residual_projection"


def mark_residual(linear: nn.Linear) -> nn.Linear:
    """Flag a projection that writes into the residual stream (gets GPT-2's scaled init)."""
    setattr(linear, RESIDUAL_ATTR, True)
    return linear


def split_heads(qkv: torch.Tensor, n_head: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fused projection's output (B, T, 3D) as three (B, H, T, D/H) head tensors."""
    B, T, D3 = qkv.shape
    shape = (B, T, n_head, D3 // 3 // n_head)
    q, k, v = (t.view(shape).transpose(1, 2) for t in qkv.chunk(3, dim=2))  # 3 x (B, H, T, h)
    return q, k, v


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """Per-head outputs (B, H, T, h) side by side: (B, T, H h)."""
    B, H, T, h = y.shape
    return y.transpose(1, 2).reshape(B, T, H * h)  # (B, T, H h)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden = config.mlp_width
        self.c_fc = nn.Linear(config.d_model, hidden, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(hidden, config.d_model, bias=config.bias))
        self.approximate = "tanh" if config.activation == "gelu_tanh" else "none"  # gelu_new when tanh

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))  # (B, T, D)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, mixer: nn.Module) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.mixer = mixer
        # mlp False: a mixer-only block (no second norm, no MLP), as in Zoology's recall models
        self.ln_2 = nn.LayerNorm(config.d_model, bias=config.bias) if config.mlp else None
        self.mlp = MLP(config) if config.mlp else None
        self.drop = nn.Dropout(config.dropout)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.mlp is None or self.ln_2 is None:
            return x  # (B, T, D)
        return x + self.drop(self.mlp(self.ln_2(x)))  # (B, T, D)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[AuxLoss, ...]]:
        out = self.mixer(self.ln_1(x))
        aux: tuple[AuxLoss, ...] = ()
        if isinstance(out, MixerOutput):
            out, aux = out.y, tuple(out.aux)
        x = x + self.drop(out)  # (B, T, D)
        return self._mlp(x), aux

    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        y, state = decoding(self.mixer).step(self.ln_1(x), state)  # (B, t, D)
        return self._mlp(x + self.drop(y)), state


def mixer_length_limit(mixer: nn.Module) -> tuple[int, str] | None:
    declared = getattr(mixer, "length_limit", None)
    return cast("tuple[int, str] | None", declared()) if callable(declared) else None  # the optional hook's contract


@dataclass(frozen=True)
class BackboneState:
    pos: int  # tokens consumed so far
    layers: tuple[Any, ...]  # one mixer state per layer


class Embeddings(Protocol):
    """What ``embed_with_positions`` reads from a model."""

    # read-only (properties), so a model whose wpe is always an Embedding fits as well
    @property
    def config(self) -> ModelConfig: ...
    @property
    def wte(self) -> nn.Embedding: ...
    @property
    def wpe(self) -> nn.Embedding | None: ...  # None: no positions (NoPE)
    @property
    def drop(self) -> nn.Dropout: ...


def embed_with_positions(model: Embeddings, idx: torch.Tensor, start: int) -> torch.Tensor:
    """Token plus learned absolute position embeddings of positions start.., then dropout:
    idx (B, T) -> (B, T, D). ``model`` holds ``wte``, ``wpe``, ``drop`` and ``config``;
    a ``wpe`` of None means no positions (NoPE): tokens alone, at any length."""
    if model.wpe is None:
        return model.drop(model.wte(idx))  # (B, T, D)
    T = idx.size(1)
    if start + T > model.config.context:
        raise ValueError(f"sequence of {start + T} tokens exceeds the model context {model.config.context}")
    pos = torch.arange(start, start + T, device=idx.device)  # (T,)
    return model.drop(model.wte(idx) + model.wpe(pos))  # (B, T, D)


class Backbone(LanguageModel):
    """GPT-2-style decoder; ``build_mixer(config, layer_idx)`` supplies each token mixer."""

    def __init__(self, config: ModelConfig, build_mixer: MixerBuilder) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        learned = config.positions == "learned"
        self.wpe = nn.Embedding(config.context, config.d_model) if learned else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, build_mixer(config, i)) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model, bias=config.bias)
        self.apply(self._init_weights)
        resid_std = 0.02 / math.sqrt(2 * config.n_layer)
        for module in self.modules():
            if isinstance(module, nn.Linear) and getattr(module, RESIDUAL_ATTR, False):
                nn.init.normal_(module.weight, mean=0.0, std=resid_std)
        for block in self._blocks():  # a mixer may override the generic init afterwards
            init_weights = getattr(block.mixer, "init_weights", None)
            if callable(init_weights):
                init_weights()

    def _blocks(self) -> list[Block]:
        return cast(list[Block], list(self.blocks))  # an nn.ModuleList is typed by Module; these are Blocks

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def _embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        return embed_with_positions(self, idx, start)  # (B, T, D)

    def length_limit(self) -> tuple[int, str] | None:
        """Learned positions end at the context; otherwise the tightest limit a mixer declares
        (a mixer's optional ``length_limit() -> (tokens, reason) | None``)."""
        if self.wpe is not None:
            C = self.config.context
            return C, f"learned absolute positions cover {C} positions (model positions: none removes them)"
        limits = [lim for b in self._blocks() if (lim := mixer_length_limit(b.mixer)) is not None]
        return min(limits, default=None)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V) tied head, no bias

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> ModelOutput:
        """Logits (B, T, V); with targets where some positions are ignored (-100, e.g. a
        recall task scoring its answers only), the head runs on the scored positions alone
        and ``logits`` is (N, V) for those N positions in order: the loss is the same, and
        the vocabulary projection, which dominates a small model's cost, shrinks to N rows."""
        x = self._embed(idx, 0)  # (B, T, D)
        aux: list[AuxLoss] = []
        for block in self.blocks:
            x, block_aux = block(x)
            aux.extend(block_aux)
        if targets is not None and not torch.compiler.is_compiling():  # compiled: no data-dependent graph break
            keep = targets != IGNORE_INDEX  # (B, T)
            if not bool(keep.all()):
                x, targets = x[keep], targets[keep]  # (N, D), (N,) scored positions only
        return lm_loss(self._head(x), targets, aux)

    def init_state(self, batch_size, max_len, device=None, dtype=None) -> BackboneState:
        device = device or self.wte.weight.device
        dtype = dtype or self.wte.weight.dtype
        layers = tuple(
            decoding(b.mixer).init_state(batch_size, max_len, device=device, dtype=dtype) for b in self._blocks()
        )
        return BackboneState(0, layers)

    def step(self, idx: torch.Tensor, state: BackboneState) -> tuple[torch.Tensor, BackboneState]:
        x = self._embed(idx, state.pos)  # (B, t, D)
        new_layers = []
        for block, layer_state in zip(self._blocks(), state.layers, strict=True):
            x, layer_state = block.step(x, layer_state)
            new_layers.append(layer_state)
        return self._head(x), BackboneState(state.pos + idx.size(1), tuple(new_layers))
