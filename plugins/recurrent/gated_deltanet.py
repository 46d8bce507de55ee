"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks", eq. 10 and the
block of section 3.4): DeltaNet (``deltanet``) with a scalar decay per head and an output gate,

    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    log a_t = -exp(A_log) * softplus(x_t W_a + dt_bias)         (Mamba2's decay, per head)
    y = W_o (norm_head(o) * swish(x W_g))

A_log ~ log U(1, 16) and dt ~ logU(1e-3, 1e-1) (dt_bias = softplus^-1(dt)), as in Mamba2.
q and k are normalised exactly, as in ``deltanet``, where fla divides by sqrt(||x||^2 + 1e-6).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, merge_heads
from attnbench.plugins.recurrent import deltanet
from attnbench.plugins.recurrent.common import full_precision_linear
from attnbench.plugins.recurrent.deltanet import DeltaNet, DeltaOptions


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


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """DeltaNet's, plus the output gate 2 d^2 and the decay projection 2 d H."""
    return (
        deltanet.flops_per_token(config, layer_idx, T) + 2.0 * config.d_model**2 + 2.0 * config.d_model * config.n_head
    )


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="gated_deltanet",
            build_mixer=GatedDeltaNet,
            options=DeltaOptions,
            decode="recurrent",
            description=(
                "Gated DeltaNet (Yang et al. 2025): delta rule with a decay per head, WY-chunked, recurrent decoding"
            ),
            state_size=deltanet.state_size,
            flops_per_token=flops_per_token,
            version="1",
        )
    )
