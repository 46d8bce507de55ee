"""Options of GLA (``gla``), free of torch: the registration sizes the mixer with
them, the mixer (``gla_model``) reads them."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig
from attnbench.plugins.recurrent.checks import check_kernel, check_positive_int


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
