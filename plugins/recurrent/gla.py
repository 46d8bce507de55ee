"""Gated linear attention (Yang et al. 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training", eq. 3-4 and section 4.4), per head:

    S_t = diag(alpha_t) S_{t-1} + k_t^T v_t,   o_t = S_t^T q_t / sqrt(d_k)
    alpha_t = sigmoid(x_t W_a1 W_a2 + b_a)^(1/tau)      (low-rank gate: rank 16, tau 16)
    y = W_o (swish(x W_r) * norm_head(o))

d_k = expand_k * d (the paper's d / 2); the gate runs in fp32 even under autocast. The paper's
LayerNorm per head is an RMS norm (as in fla). Training runs the chunked kernel with a
decay per key channel (``gla_kernel``); decoding carries S (B, H, d_k / H, d / H).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, mark_residual, merge_heads
from attnbench.plugins.recurrent.common import (
    HeadRMSNorm,
    check_kernel,
    check_positive_int,
    full_precision_linear,
    require_fla,
)
from attnbench.plugins.recurrent.fla_ops import FLA_OPS, fla_gla
from attnbench.plugins.recurrent.gla_kernel import (
    FACTOR_SPAN,
    gated_linear_attention,
    gla_flops_per_token,
    gla_init_state,
    pair_decay,
)


@dataclass(frozen=True)
class GLAOptions:
    """chunk_size: positions per chunk. Scores inside a chunk are one matmul where its decay
    spans at most e^-30 per channel, else c x c x d_k pairwise decays (``gla_kernel``); 16 keeps
    that fallback to channels with gate logits below about -30 for 16 steps running. Train step
    time against chunk 16, one CPU thread (``benchmarks/bench_gla_chunks.py``, 2026-11-27): chunk
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


def _options(config: ModelConfig) -> GLAOptions:
    return config.options if isinstance(config.options, GLAOptions) else GLAOptions()


def key_width(config: ModelConfig) -> int:
    """d_k over all heads: expand_k * d_model, a multiple of n_head."""
    d_k = int(round(_options(config).expand_k * config.d_model))
    if d_k < config.n_head or d_k % config.n_head:
        raise ValueError(
            f"gla: expand_k * d_model = {d_k} must be a positive multiple of n_head = {config.n_head}; change expand_k"
        )
    return d_k


def _split(t: torch.Tensor, n_head: int) -> torch.Tensor:
    B, T, _ = t.shape
    return t.view(B, T, n_head, -1).transpose(1, 2)  # (B, H, T, e)


class GatedLinearAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = _options(config)
        D, d_k, bias = config.d_model, key_width(config), config.bias
        self.n_head, self.chunk_size, self.kernel = config.n_head, opts.chunk_size, opts.kernel
        self.d_k, self.d_v, self.temperature = d_k // config.n_head, config.head_dim, opts.gate_temperature
        self.q_proj, self.k_proj = nn.Linear(D, d_k, bias=bias), nn.Linear(D, d_k, bias=bias)
        self.v_proj, self.r_proj = nn.Linear(D, D, bias=bias), nn.Linear(D, D, bias=bias)
        self.gate_down = nn.Linear(D, opts.gate_rank, bias=False)
        self.gate_up = nn.Linear(opts.gate_rank, d_k, bias=True)
        self.norm = HeadRMSNorm(self.d_v)
        self.c_proj = mark_residual(nn.Linear(D, D, bias=bias))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, d_k={self.d_k}, chunk_size={self.chunk_size}, kernel={self.kernel}"

    def describe_path(self) -> dict[str, object]:
        parallel = FLA_OPS["gla"] if self.kernel == "fla" else "recurrent.gla_kernel.gated_linear_attention"
        path: dict[str, object] = {
            "kernel": parallel,
            "decode_kernel": "recurrent.gla_kernel.gated_linear_attention",
            "chunk_size": self.chunk_size,
        }
        if self.kernel != "fla":  # ours: per chunk one matmul where its decay spans <= e^-FACTOR_SPAN
            path["intra_chunk_scores"] = f"factorised within e^-{FACTOR_SPAN:g}, else pairwise"
        return path

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        H = self.n_head
        q, k, v = _split(self.q_proj(x), H), _split(self.k_proj(x), H), _split(self.v_proj(x), H)  # (B, H, T, .)
        logits = full_precision_linear(self.gate_up, full_precision_linear(self.gate_down, x))  # (B, T, H d_k) fp32
        g = F.logsigmoid(logits) / self.temperature  # (B, T, H d_k) log alpha <= 0
        return q, k, v, _split(g, H)  # (B, H, T, d_k) x 2, (B, H, T, d_v), (B, H, T, d_k)

    def _out(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.silu(self.r_proj(x)) * merge_heads(self.norm(o)))  # (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, g = self._heads(x)
        if self.kernel == "fla":
            require_fla("gla", x)
            return self._out(x, fla_gla(q, k, v, g, self.d_k**-0.5))  # (B, T, D)
        o, _ = gated_linear_attention(
            q, k, v, g, self.init_state(x.shape[0], 0, x.device, x.dtype), self.chunk_size, self.d_k**-0.5
        )  # (B, H, T, d_v)
        return self._out(x, o)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> torch.Tensor:
        """S (B, H, d_k, d_v), zero: fp32 unless float64 is asked."""
        return gla_init_state(batch_size, self.n_head, self.d_k, self.d_v, device, dtype)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v, g = self._heads(x)
        o, new = gated_linear_attention(q, k, v, g, state, self.chunk_size, self.d_k**-0.5)  # (B, H, t, d_v)
        return self._out(x, o), new


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return key_width(config) * config.head_dim  # H heads x d_k x d_v, independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """q, k (2 d d_k), v, r, output (3 d^2) and the low-rank gate, plus the chunked kernel."""
    opts, D, d_k = _options(config), config.d_model, key_width(config)
    proj = 2.0 * (2 * D * d_k + 3 * D * D + opts.gate_rank * (D + d_k))
    return proj + gla_flops_per_token(config.n_head, d_k // config.n_head, config.head_dim, opts.chunk_size, T, True)


@torch.no_grad()
def attention_maps(mixer: GatedLinearAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = sum_d q_id k_jd prod_{j<s<=i} alpha_sd / sqrt(d_k), j <= i (signed): (B, H, T, T)."""
    q, k, _, g = mixer._heads(x)  # (B, H, T, d_k)
    decay = pair_decay(g.float())  # (B, H, d_k, T, T) prod_{j<s<=i} alpha_s, 0 for j > i
    return torch.einsum("bhid,bhjd,bhdij->bhij", q.float(), k.float(), decay) * mixer.d_k**-0.5  # (B, H, T, T)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="gla",
            build_mixer=GatedLinearAttention,
            options=GLAOptions,
            decode="recurrent",
            description=(
                "Gated linear attention (Yang et al. 2024): data-dependent decay per key channel, "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=attention_maps,
        )
    )
