"""The Gated DeltaNet mixer (the equations and the registration are in ``gated_deltanet``):
DeltaNet's module (``deltanet_model``) with a decay per head and an output gate."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, merge_heads
from attnbench.plugins.recurrent.common import full_precision_linear
from attnbench.plugins.recurrent.deltanet_model import DeltaNet


class GatedDeltaNet(DeltaNet):
    name = "gated_deltanet"

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        D, H = config.d_model, config.n_head
        self.a_proj = nn.Linear(D, H, bias=False)
        self.g_proj = nn.Linear(D, D, bias=config.bias)
        self.A_log = nn.Parameter(torch.empty(H).uniform_(1.0, 16.0).log())  # (H,)
        dt = torch.exp(torch.empty(H).uniform_(math.log(1e-3), math.log(1e-1)))  # (H,)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # (H,) softplus(dt_bias) = dt

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        a = full_precision_linear(self.a_proj, x)  # (B, T, H) fp32 even under autocast
        rate = F.softplus(a + self.dt_bias.to(a.dtype))  # (B, T, H) > 0
        return (-torch.exp(self.A_log.to(a.dtype)) * rate).transpose(1, 2)  # (B, H, T) log a_t < 0

    def _out(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(self.norm(o)) * F.silu(self.g_proj(x)))  # (B, T, D)
