"""Causal linear attention (Katharopoulos et al., "Transformers are RNNs", 2020):

    o_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps),   S_i = sum_{j<=i} phi(k_j) v_j^T,
    z_i = sum_{j<=i} phi(k_j),   phi(x) = elu(x) + 1,   then W_o        (per head, h = D / H)

No 1/sqrt(h) scaling, nothing applied to the values, eps = 1e-6 added after the dot
product (as in fast-transformers). Training runs the chunkwise form of
``attnbench.plugins.kernels.chunked.linear_attention`` (masked c x c scores inside a chunk, carried state
across chunks: memory O(T d), never O(T h_k h_v)); decoding carries S (B, H, h, h) and
z (B, H, h) as an explicit state, returned as new tensors on every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, mark_residual, merge_heads, split_heads

from attnbench.plugins.kernels.chunked import LinearState, chunked_flops_per_token, linear_attention, linear_init_state


@dataclass(frozen=True)
class LinearOptions:
    """chunk_size: positions per chunk of the parallel form (64 was fastest at T = 1k-16k
    on CPU, h = 32; see benchmarks/bench_kernels.py). eps: added to the normaliser."""

    chunk_size: int = 64
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < self.eps < 1:
            raise ValueError(f"eps must be a number in (0, 1), got {self.eps!r}")


def _options(config: ModelConfig) -> LinearOptions:
    return config.options if isinstance(config.options, LinearOptions) else LinearOptions()


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0, elementwise."""
    return F.elu(x).add_(1.0)  # same shape as x; in place: elu's backward keeps its input, not its output


class LinearAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = _options(config)
        self.n_head, self.chunk_size, self.eps = config.n_head, opts.chunk_size, opts.eps
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, chunk_size={self.chunk_size}, eps={self.eps:g}"

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = split_heads(self.c_attn(x), self.n_head)  # 3 x (B, H, T, h)
        # phi in fp32: under autocast the projections are half precision.
        return feature_map(q.float()), feature_map(k.float()), v  # (B, H, T, h)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(y))  # (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fq, fk, v = self._heads(x)  # (B, H, T, h)
        B, H, _, h = v.shape
        y, _ = linear_attention(fq, fk, v, linear_init_state(B, H, h, h, x.device),
                                self.chunk_size, self.eps)  # (B, H, T, h)
        return self._merge(y)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> LinearState:
        """Zero S and z. Kept in fp32 whatever ``dtype`` is asked: they are running sums."""
        h = self.c_attn.out_features // 3 // self.n_head
        return linear_init_state(batch_size, self.n_head, h, h, device)

    def step(self, x: torch.Tensor, state: LinearState) -> tuple[torch.Tensor, LinearState]:
        fq, fk, v = self._heads(x)  # (B, H, t, h)
        y, new = linear_attention(fq, fk, v, state, self.chunk_size, self.eps)  # (B, H, t, h)
        return self._merge(y), new


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    h = config.head_dim
    return config.n_head * (h * h + h)  # S and z, independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    return chunked_flops_per_token(config.d_model, config.n_head, config.head_dim,
                                   _options(config).chunk_size, T)


@torch.no_grad()
def attention_maps(mixer: LinearAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = phi(q_i).phi(k_j) / (sum_{j'<=i} phi(q_i).phi(k_j') + eps): (B, H, T, T)."""
    fq, fk, _ = mixer._heads(x)  # (B, H, T, h) phi in fp32
    a = (fq @ fk.transpose(-1, -2)).tril()  # (B, H, T, T) causal kernel values >= 0
    return a / (a.sum(-1, keepdim=True) + mixer.eps)  # (B, H, T, T) the eps as in forward


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="linear",
            build_mixer=LinearAttention,
            description="Causal linear attention, phi = elu + 1 (Katharopoulos 2020), chunkwise, recurrent decoding",
            options=LinearOptions,
            decode="recurrent",
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=attention_maps,
        )
    )
