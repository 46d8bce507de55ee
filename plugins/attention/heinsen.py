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
``HeinsenLM``) are in ``attnbench.plugins.attention.heinsen_model`` (torch); this module holds the
options, the analytic sizes and the registration.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig, Variant, chunked_flops_per_token, hookimpl

MODEL = "attnbench.plugins.attention.heinsen_model"  # torch: imported when the first mixer is built


@dataclass(frozen=True)
class HeinsenOptions:
    """chunk_size: positions per chunk of the parallel form, in the backbone mixer and in
    the reference model (64 was fastest at T = 1k-16k on CPU, h = 32; see
    benchmarks/bench_kernels.py)."""

    chunk_size: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")


def options_of(config: ModelConfig) -> HeinsenOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, HeinsenOptions) else HeinsenOptions()


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    h = config.head_dim
    return config.n_head * (h * h + h + h)  # log S, log z, running key max


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    return chunked_flops_per_token(config.d_model, config.n_head, config.head_dim, options_of(config).chunk_size, T)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="heinsen",
            build_mixer=f"{MODEL}:LogAttention",
            description="Heinsen log-space attention (linear attention, phi = exp), chunked, max-stabilised",
            options=HeinsenOptions,
            build_model=f"{MODEL}:build_model",
            decode="recurrent",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="3",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
