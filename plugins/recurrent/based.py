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
this module holds its options and registers them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.checks import KERNELS, check_kernel, check_positive_int
from attnbench.plugins.recurrent.flops import mean_keys

MODEL = "attnbench.plugins.recurrent.based_model"  # torch: imported when the first mixer is built


FLA_TAYLOR_OP = "fla.ops.based.parallel_based"


@dataclass(frozen=True)
class BasedOptions:
    """feature_dim: f, the q~ and k~ size per head (the paper's 16; 1 + f + f^2 features).
    window: positions the softmax part sees, itself included (the paper's small windows:
    64 to 128). chunk_size: positions per chunk (block) of the training forms. eps: added
    to the linear part's normaliser. kernel: chunked (ours) or fla (fla's parallel_based and
    parallel_attn Triton kernels, CUDA only; decoding stays on ours)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kernel": KERNELS}
    feature_dim: int = 16
    window: int = 64
    chunk_size: int = 64
    eps: float = 1e-6
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        for name in ("feature_dim", "window", "chunk_size"):
            check_positive_int(name, getattr(self, name))
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise ValueError(f"eps must be a number in (0, 1), got {self.eps!r}")
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> BasedOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, BasedOptions) else BasedOptions()


def n_features(f: int) -> int:
    return 1 + f + f * f  # the Taylor map's 0th, 1st and 2nd order terms


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


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="based",
            build_mixer=f"{MODEL}:Based",
            options=BasedOptions,
            decode="recurrent",
            description=(
                "Based (Arora et al. 2024): Taylor linear attention plus a small softmax window; "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
