"""Two third-party variants at the ends of what a variant may declare, for reports that
must render every optional fact as declared or "not declared". Load through an entry point:

    fake_distribution(tmp_path, "declared-dist", "declared", module="tests.declared_variants")

variant  declares
full     options, its own model, KV-cache decoding, state size, FLOPs per token, attention maps
bare     nothing optional: a name and a mixer (a causal running mean, no decoding)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbench import Backbone, ModelConfig, Variant, hookimpl, mark_residual
from attnbench.plugins.attention import softmax, softmax_model


@dataclass(frozen=True)
class FullOptions:
    gain: float = 1.0  # scales the attention output


class GainedAttention(softmax_model.SoftmaxAttention):
    """Softmax attention with its output scaled:  y = gain * softmax(Q K^T / sqrt(h)) V W_o."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.gain = (config.options or FullOptions()).gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gain * super().forward(x)  # (B, T, D)

    def step(self, x: torch.Tensor, state):
        y, new = super().step(x, state)  # (B, t, D)
        return self.gain * y, new


class RunningMean(nn.Module):
    """Causal running mean:  y_t = W_o (1/(t+1)) sum_{j<=t} W_v x_j."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.v = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.o = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.arange(1, x.size(1) + 1, device=x.device, dtype=x.dtype)[:, None]  # (T, 1)
        return self.o(torch.cumsum(self.v(x), dim=1) / n)  # (B, T, D)


def build_full_model(config: ModelConfig) -> Backbone:
    return Backbone(config, GainedAttention)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="full",
            build_mixer=GainedAttention,
            description="softmax with a gain; every fact",
            options=FullOptions,
            build_model=build_full_model,
            decode="kv_cache",
            state_size=softmax.state_size,
            flops_per_token=softmax.flops_per_token,
            attention_maps=softmax_model.attention_maps,
            version="1",
        )
    )
    register(Variant(name="bare", build_mixer=RunningMean))
