"""Heinsen's log-space attention ("Softmax attention with constant cost per token", 2024):

    o_i = log sum_{j<=i} exp(LSE_d(q_id + k_jd) + log V_j) - log sum_{j<=i} exp(LSE_d(q_id + k_jd))

i.e. log of linear attention with phi = exp and values exp(log V) (spec 5.1). Computed by
``attnbench.kernels.chunked.log_attention``: chunkwise with running max-stabilisers, so it is
causal at every magnitude (every stabiliser a row sees depends on positions <= its own) and
never materialises the [B, H, T, h_k, h_v] tensor of the reference; decoding carries the
log-space state (log S, log z, running key max) as an explicit value. fp32 against a
float64 term-by-term evaluation (tests/test_kernels.py, tests/test_heinsen_fp32.py,
benchmarks/bench_heinsen_fp32.py; h = 32): within 2e-5 relative for q, k std up to 20
with log V std up to 50 (one exception: chunk 16 at q, k std 20, log V std 50, 2.3e-2),
and with an early token of k = -150, log V = 200; gradients within 2e-5 (of the largest)
up to q, k std 15. With log V std >= 20, not accurate from q, k std 25 (1e-4 to O(1): a
row's largest term pairs a weight and a value ~e^90 apart), nor are gradients from std 20
(3e-2 to 0.15); outputs and gradients stay finite and causal even at q, k x100, and the
float64 run is exact. A later change moves no earlier output (1e-6). Runs in float64
when given float64.

In the shared backbone one mixer is: x (B, T, D) -> q, k, log V per head (one Linear
D -> 3D) -> log attention -> o (B, H, T, h) -> W_o. The output o is the *log* of the
mixture and goes straight into the output projection, as the reference model feeds it
to its Linear -> GLU; nothing exponentiates it back (that could overflow, and a linear
map of the log-output is what the reference learns with).

The mixer (``LogAttention``) and the variant's own reference model (``build_model``:
``HeinsenLM``) are in ``attnbench.plugins.attention.heinsen_model`` (torch), the options in
``heinsen_options``; this module holds the analytic sizes and the registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench import ModelConfig, Variant, chunked_flops_per_token, hookimpl
from attnbench.plugins.attention.heinsen_options import HeinsenOptions, options_of

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnbench.plugins.attention.heinsen_model import HeinsenLM, LogAttention


def _build_mixer(config: ModelConfig, layer_idx: int) -> nn.Module:
    # torch loads with the model, not the registration
    from attnbench.plugins.attention.heinsen_model import LogAttention

    return LogAttention(config, layer_idx)


def build_model(config: ModelConfig) -> HeinsenLM:
    from attnbench.plugins.attention.heinsen_model import HeinsenLM

    return HeinsenLM(config, options_of(config).chunk_size)


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    h = config.head_dim
    return config.n_head * (h * h + h + h)  # log S, log z, running key max


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    return chunked_flops_per_token(config.d_model, config.n_head, config.head_dim, options_of(config).chunk_size, T)


def attention_maps(mixer: LogAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = softmax_{j<=i}(LSE_d(q_id + k_jd)) (linear attention with
    phi = exp): (B, H, T, T)."""
    from attnbench.plugins.attention import heinsen_model

    return heinsen_model.attention_maps(mixer, x)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="heinsen",
            build_mixer=_build_mixer,
            description="Heinsen log-space attention (linear attention, phi = exp), chunked, max-stabilised",
            options=HeinsenOptions,
            build_model=build_model,
            decode="recurrent",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="3",
            attention_maps=attention_maps,
        )
    )
