"""Gated linear attention (Yang et al. 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training", eq. 3-4 and section 4.4), per head:

    S_t = diag(alpha_t) S_{t-1} + k_t^T v_t,   o_t = S_t^T q_t / sqrt(d_k)
    alpha_t = sigmoid(x_t W_a1 W_a2 + b_a)^(1/tau)      (low-rank gate: rank 16, tau 16)
    y = W_o (swish(x W_r) * norm_head(o))

d_k = expand_k * d (the paper's d / 2); the gate runs in fp32 even under autocast. The paper's
LayerNorm per head is an RMS norm (as in fla). Training runs the chunked kernel with a
decay per key channel (``gla_kernel``); decoding carries S (B, H, d_k / H, d / H).
The mixer (``GatedLinearAttention``) and its attention maps are in ``gla_model``; this module
registers them without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.flops import gla_flops_per_token
from attnbench.plugins.recurrent.gla_options import GLAOptions, key_width, options_of

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.recurrent.gla_model import GatedLinearAttention


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return key_width(config) * config.head_dim  # H heads x d_k x d_v, independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """q, k (2 d d_k), v, r, output (3 d^2) and the low-rank gate, plus the chunked kernel."""
    opts, D, d_k = options_of(config), config.d_model, key_width(config)
    proj = 2.0 * (2 * D * d_k + 3 * D * D + opts.gate_rank * (D + d_k))
    return proj + gla_flops_per_token(config.n_head, d_k // config.n_head, config.head_dim, opts.chunk_size, T, True)


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    # torch loads with the model, not the registration
    from attnbench.plugins.recurrent.gla_model import GatedLinearAttention

    return GatedLinearAttention(config, layer_idx)


def _attention_maps(mixer: GatedLinearAttention, x: torch.Tensor) -> torch.Tensor:
    from attnbench.plugins.recurrent.gla_model import attention_maps

    return attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="gla",
            build_mixer=_build_mixer,
            options=GLAOptions,
            decode="recurrent",
            description=(
                "Gated linear attention (Yang et al. 2024): data-dependent decay per key channel, "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=_attention_maps,
        )
    )
