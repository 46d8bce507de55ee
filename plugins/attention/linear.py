"""Causal linear attention (Katharopoulos et al., "Transformers are RNNs", 2020):

    o_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps),   S_i = sum_{j<=i} phi(k_j) v_j^T,
    z_i = sum_{j<=i} phi(k_j),   phi(x) = elu(x) + 1 by default,   then W_o   (per head, h = D / H)

``feature_map`` picks phi (``FEATURE_MAPS``; fast-transformers takes any map, and the Based
paper compares several on MQAR): elu (elu + 1), relu, softmax (softmax over the head
dimension: positive, normalised), taylor (2nd-order Taylor of exp(q.k / sqrt(h)), as in
Based: [1, x / h^(1/4), x (x) x / (sqrt(2) sqrt(h))], 1 + h + h^2 features) and performer
(FAVOR+ positive random features of exp(q.k / sqrt(h)), 2h orthogonal Gaussian features;
redraw policy: drawn once when the mixer is built, from the build seed, kept as a buffer
that checkpoints save, never redrawn, so training, evaluation and decoding use one draw).

No 1/sqrt(h) scaling, nothing applied to the values, eps = 1e-6 added after the dot
product (as in fast-transformers). Training runs the chunkwise form of
``attnbench.kernels.chunked.linear_attention`` (masked c x c scores inside a chunk, carried state
across chunks: memory O(T d), never O(T h_k h_v)); decoding carries S (B, H, h, h) and
z (B, H, h) as an explicit state, returned as new tensors on every step.

The mixer and its feature maps (torch) are in ``attnbench.plugins.attention.linear_model``, the
options and the feature maps' widths in ``linear_options``; this module holds the analytic sizes
and the registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, chunked_flops_per_token, hookimpl
from attnbench.plugins.attention.linear_options import LinearOptions, feature_dim, options_of

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.attention.linear_model import LinearAttention


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    # torch loads with the model, not the registration
    from attnbench.plugins.attention.linear_model import LinearAttention

    return LinearAttention(config, layer_idx)


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    h = config.head_dim
    f = feature_dim(options_of(config).feature_map, h)
    return config.n_head * (f * h + f)  # S (F x h) and z (F), independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    opts = options_of(config)
    return chunked_flops_per_token(
        config.d_model,
        config.n_head,
        config.head_dim,
        opts.chunk_size,
        T,
        feature_dim(opts.feature_map, config.head_dim),
        from_empty=True,  # training passes no state
    )


def attention_maps(mixer: LinearAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = phi(q_i).phi(k_j) / (sum_{j'<=i} phi(q_i).phi(k_j') + eps): (B, H, T, T)."""
    from attnbench.plugins.attention import linear_model

    return linear_model.attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="linear",
            build_mixer=_build_mixer,
            description=(
                "Causal linear attention, phi = elu + 1 or another feature map (Katharopoulos 2020), "
                "chunkwise, recurrent decoding"
            ),
            options=LinearOptions,
            decode="recurrent",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=attention_maps,
        )
    )
