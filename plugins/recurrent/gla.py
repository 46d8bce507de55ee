"""Gated linear attention (Yang et al. 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training", eq. 3-4 and section 4.4), per head:

    S_t = diag(alpha_t) S_{t-1} + k_t^T v_t,   o_t = S_t^T q_t / sqrt(d_k)
    alpha_t = sigmoid(x_t W_a1 W_a2 + b_a)^(1/tau)      (low-rank gate: rank 16, tau 16)
    y = W_o (swish(x W_r) * norm_head(o))

d_k = expand_k * d (the paper's d / 2); the gate runs in fp32 even under autocast. The paper's
LayerNorm per head is an RMS norm (as in fla). Training runs the chunked kernel with a
decay per key channel (``gla_kernel``); decoding carries S (B, H, d_k / H, d / H).
The mixer (``GatedLinearAttention``) and its attention maps are in ``gla_model``; this module holds
its options and registers them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.checks import check_kernel, check_positive_int
from attnbench.plugins.recurrent.flops import gla_flops_per_token

MODEL = "attnbench.plugins.recurrent.gla_model"  # torch: imported when the first mixer is built


@dataclass(frozen=True)
class GLAOptions:
    """chunk_size: positions per chunk. Scores inside a chunk are one matmul where its decay
    spans at most e^-8 per channel, else c x c x d_k pairwise decays (``gla_kernel.GLA_SPAN``); 16
    keeps that fallback to gates whose log decays sum below -8 over 16 steps running. Train step
    time against chunk 16, one CPU thread (bench_gla_chunks.py at 21ac57f, 2026-11-27): chunk
    8 1.04x and 1.18x at d 64 / T 64 and d 128 / T 8192, chunk 64 0.92x and 0.95x. expand_k: key
    width over d_model. gate_rank, gate_temperature: the gate's low rank and tau. kernel: chunked
    (ours) or fla (CUDA only; decoding stays on ours)."""

    chunk_size: int = 16
    expand_k: float = 0.5
    gate_rank: int = 16
    gate_temperature: float = 16.0
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        check_positive_int("chunk_size", self.chunk_size)
        check_positive_int("gate_rank", self.gate_rank)
        for name in ("expand_k", "gate_temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> GLAOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, GLAOptions) else GLAOptions()


def key_width(config: ModelConfig) -> int:
    """d_k over all heads: expand_k * d_model, a multiple of n_head."""
    d_k = int(round(options_of(config).expand_k * config.d_model))
    if d_k < config.n_head or d_k % config.n_head:
        raise ValueError(
            f"gla: expand_k * d_model = {d_k} must be a positive multiple of n_head = {config.n_head}; change expand_k"
        )
    return d_k


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return key_width(config) * config.head_dim  # H heads x d_k x d_v, independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """q, k (2 d d_k), v, r, output (3 d^2) and the low-rank gate, plus the chunked kernel."""
    opts, D, d_k = options_of(config), config.d_model, key_width(config)
    proj = 2.0 * (2 * D * d_k + 3 * D * D + opts.gate_rank * (D + d_k))
    return proj + gla_flops_per_token(config.n_head, d_k // config.n_head, config.head_dim, opts.chunk_size, T, True)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="gla",
            build_mixer=f"{MODEL}:GatedLinearAttention",
            options=GLAOptions,
            decode="recurrent",
            description=(
                "Gated linear attention (Yang et al. 2024): data-dependent decay per key channel, "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
