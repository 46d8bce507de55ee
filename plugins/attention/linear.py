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

The mixer and its feature maps (torch) are in ``attnbench.plugins.attention.linear_model``; this
module holds the options, the feature maps' widths, the analytic sizes and the registration.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig, Variant, chunked_flops_per_token, hookimpl

MODEL = "attnbench.plugins.attention.linear_model"  # torch: imported when the first mixer is built


@dataclass(frozen=True)
class LinearOptions:
    """chunk_size: positions per chunk of the parallel form (64 was fastest at T = 1k-16k
    on CPU, h = 32; see benchmarks/bench_kernels.py). eps: added to the normaliser.
    feature_map: phi, one of elu (elu + 1, default), relu, softmax, taylor, performer.
    kernel: the parallel form's kernel: chunked (ours) or fla (flash-linear-attention's Triton
    kernel, CUDA only; decoding stays on ours, so the gate checks one against the other)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "feature_map": ("elu", "relu", "softmax", "taylor", "performer"),
        "kernel": ("chunked", "fla"),
    }
    chunk_size: int = 64
    eps: float = 1e-6
    feature_map: str = "elu"
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise ValueError(f"eps must be a number in (0, 1), got {self.eps!r}")
        if self.feature_map not in FEATURE_MAPS:
            close = difflib.get_close_matches(str(self.feature_map), FEATURE_MAPS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"feature_map must be one of {list(FEATURE_MAPS)}, got {self.feature_map!r}{hint}")
        if self.kernel not in self.CHOICES["kernel"]:
            raise ValueError(f"kernel must be one of {list(self.CHOICES['kernel'])}, got {self.kernel!r}")


def options_of(config: ModelConfig) -> LinearOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, LinearOptions) else LinearOptions()


FEATURE_MAPS = LinearOptions.CHOICES["feature_map"]


def feature_dim(name: str, h: int) -> int:
    """Features per head of each map: h, except taylor 1 + h + h^2 and performer 2h."""
    return {"taylor": 1 + h + h * h, "performer": 2 * h}.get(name, h)


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


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="linear",
            build_mixer=f"{MODEL}:LinearAttention",
            description=(
                "Causal linear attention, phi = elu + 1 or another feature map (Katharopoulos 2020), "
                "chunkwise, recurrent decoding"
            ),
            options=LinearOptions,
            decode="recurrent",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
