"""Based (Arora et al. 2024, "Simple linear attention language models balance the
recall-throughput tradeoff"): linear attention with the 2nd-order Taylor map on small
feature projections, plus a small sliding window of exact softmax attention:

    lin_i = phi(q~_i)^T sum_{j<=i} phi(k~_j) v_j^T / (phi(q~_i)^T sum_{j<=i} phi(k~_j) + eps)
    phi(q~).phi(k~) = 1 + q~.k~ / sqrt(f) + (q~.k~)^2 / (2 f)      (q~, k~ of f dims per head)
    swa_i = softmax_{i-w<j<=i}(q_i . k_j / sqrt(h)) v_j
    y = W_o (lin + swa) / 2

The paper stacks the two as separate layers; here one mixer holds both over a shared v, so
y mixes the values by (A_lin + A_swa) / 2, rows summing to 1 (that is its attention map).
Training: the chunked Taylor kernel (``taylor_kernel``: scores inside a chunk from q~.k~) and
the blocked window kernel; decoding carries the Taylor state (S, z) and the last w - 1 keys
and values. The mixer (``Based``), its decode state and attention maps are in ``based_model``;
this module registers them without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.based_options import BasedOptions, n_features, options_of
from attnbench.plugins.recurrent.flops import mean_keys

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.recurrent.based_model import Based


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    opts = options_of(config)
    F_ = n_features(opts.feature_dim)
    linear = config.n_head * (F_ * config.head_dim + F_)  # S and z, independent of T
    return linear + 2 * min(T, opts.window - 1) * config.d_model  # + the window's keys and values


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """Projections (q~, k~: 4 d H f; q, k, v, out: 8 d^2), the chunked Taylor part per head as
    ``taylor_attention`` computes it (c x c scores from q~.k~ 2 c f; scores @ [v, 1] 2 c (h+1);
    the state over the F_s = 1 + f + f (f + 1) / 2 symmetric features 4 F_s (h+1)) and the
    window part (2 * 2 d per key seen). Training with T <= chunk starts empty in one chunk: no
    state term."""
    opts = options_of(config)
    d, H, h, f = config.d_model, config.n_head, config.head_dim, opts.feature_dim
    F_s, c = 1 + f + f * (f + 1) // 2, min(opts.chunk_size, max(T, 1))
    state = 0.0 if opts.chunk_size >= T else 4.0 * F_s * (h + 1)
    taylor = H * (2.0 * c * f + 2.0 * c * (h + 1) + state)
    return 4.0 * d * H * f + 8.0 * d * d + taylor + 4.0 * d * mean_keys(T, opts.window)


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    from attnbench.plugins.recurrent.based_model import Based  # torch loads with the model, not the registration

    return Based(config, layer_idx)


def _attention_maps(mixer: Based, x: torch.Tensor) -> torch.Tensor:
    from attnbench.plugins.recurrent.based_model import attention_maps

    return attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="based",
            build_mixer=_build_mixer,
            options=BasedOptions,
            decode="recurrent",
            description=(
                "Based (Arora et al. 2024): Taylor linear attention plus a small softmax window; "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=_attention_maps,
        )
    )
