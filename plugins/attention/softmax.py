"""Softmax causal attention (GPT-2 baseline).

    y = softmax(Q K^T / sqrt(h) + M_causal) V,  then W_o    (per head, h = D / H)

Training uses fused ``scaled_dot_product_attention(is_causal=True)`` (flash / memory-
efficient kernels where the device has them). Decoding writes K and V into a cache
preallocated for ``max_len`` positions: no concatenation, O(T d) work per new token.

The mixer (torch) is in ``attnbench.plugins.attention.softmax_model``; this module registers it.
"""

from __future__ import annotations

from attnbench import ModelConfig, Variant, hookimpl

MODEL = "attnbench.plugins.attention.softmax_model"  # torch: imported when the first mixer is built


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return 2 * T * config.d_model  # K and V for T positions


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    d = config.d_model
    # QKV and output projections: 2*d*3d + 2*d*d; scores and mixing over on average
    # (T+1)/2 causal keys: 2 * 2*d*(T+1)/2.
    return 8.0 * d * d + 2.0 * d * (T + 1)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="softmax",
            build_mixer=f"{MODEL}:SoftmaxAttention",
            description="Causal softmax attention (GPT-2 baseline), fused SDPA, preallocated KV cache",
            decode="kv_cache",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
