"""Mamba2 (Dao & Gu 2024, "Transformers are SSMs", sec. 7 and Fig. 6), per head with a
scalar decay (SSD):

    [z, xBC, dt] = W_in u;   [x, B, C] = silu(conv1d_causal(xBC));   dt = softplus(dt + dt_bias)
    S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T,   y_t = S_t^T C_t + D x_t,   A = -exp(A_log) < 0
    out = W_out RMSNorm(y * silu(z))

x has expand * D channels in H = n_head heads of P = expand * D / H; B and C (d_state each)
are shared by the heads of a group (n_groups). Training runs ``ssd_kernel.ssd_scan``
(chunked); decoding carries the convolution's last d_conv - 1 inputs and S (B, H, N_s, P).
The mixer (``Mamba2``), its decode state and attention maps are in ``mamba2_model``; this module
registers them without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.flops import ssd_flops_per_token
from attnbench.plugins.recurrent.mamba2_options import Mamba2Options, dims, options_of

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.recurrent.mamba2_model import Mamba2


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    opts = options_of(config)
    inner, head_dim, conv_dim = dims(config)
    return (opts.d_conv - 1) * conv_dim + config.n_head * opts.d_state * head_dim  # independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """Input and output projections, the depthwise convolution, and the chunked SSD scan."""
    opts = options_of(config)
    inner, head_dim, conv_dim = dims(config)
    d = config.d_model
    proj = 2.0 * d * (inner + conv_dim + config.n_head) + 2.0 * inner * d
    return (
        proj
        + 2.0 * conv_dim * opts.d_conv
        + ssd_flops_per_token(config.n_head, opts.d_state, head_dim, opts.chunk_size, T, opts.n_groups)
    )


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    from attnbench.plugins.recurrent.mamba2_model import Mamba2  # torch loads with the model, not the registration

    return Mamba2(config, layer_idx)


def _attention_maps(mixer: Mamba2, x: torch.Tensor) -> torch.Tensor:
    from attnbench.plugins.recurrent.mamba2_model import attention_maps

    return attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="mamba2",
            build_mixer=_build_mixer,
            options=Mamba2Options,
            decode="recurrent",
            description=(
                "Mamba2 (Dao & Gu 2024): SSD with a scalar decay per head, short convolution, gated RMSNorm; "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=_attention_maps,
        )
    )
