"""DeltaNet (Schlag et al. 2021; Yang et al. 2024, "Parallelizing Linear Transformers with
the Delta Rule over Sequence Length", section 3 and the architecture of section 4), per head:

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t / sqrt(h)
    [q, k, v] = SiLU(ShortConv([x W_q, x W_k, x W_v])),  q, k L2-normalised,  beta_t = sigmoid(x_t W_b)
    y = W_o norm_head(o)

Training runs the WY-form chunked kernel (``delta_kernel``); decoding carries S and the
short convolution's last K - 1 inputs. ``gated_deltanet`` builds on this module.
q and k are normalised exactly (x / ||x||, as ``F.normalize``, taken as x * rsqrt(||x||^2): a
product's backward is cheaper than a quotient's), where fla divides by sqrt(||x||^2 + 1e-6):
a relative difference of about 5e-7 / ||x||^2.
The mixer (``DeltaNet``) and its decode state are in ``deltanet_model``; this module registers
them without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.deltanet_options import DeltaOptions, options_of
from attnbench.plugins.recurrent.flops import delta_flops_per_token

if TYPE_CHECKING:
    from torch import nn


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    """S per head plus the last K - 1 projected [q, k, v] of the short convolution."""
    conv = options_of(config).conv_size
    return config.n_head * config.head_dim**2 + max(conv - 1, 0) * 3 * config.d_model


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """q, k, v, output projections 8 d^2, beta 2 d H, short convolution 2 K 3d, plus the kernel."""
    opts, D, h = options_of(config), config.d_model, config.head_dim
    return (
        8.0 * D * D
        + 2.0 * D * config.n_head
        + 6.0 * opts.conv_size * D
        + delta_flops_per_token(config.n_head, h, h, opts.chunk_size, T)
    )


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    from attnbench.plugins.recurrent.deltanet_model import DeltaNet  # torch loads with the model, not the registration

    return DeltaNet(config, layer_idx)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="deltanet",
            build_mixer=_build_mixer,
            options=DeltaOptions,
            decode="recurrent",
            description=(
                "DeltaNet (delta rule; Yang et al. 2024): chunked in the WY form, short convolution, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
        )
    )
