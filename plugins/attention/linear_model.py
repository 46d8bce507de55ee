"""The causal linear attention mixer and its feature maps (torch); the equations, options and
registration are in ``attnbench.plugins.attention.linear``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import (
    LinearState,
    ModelConfig,
    linear_attention,
    linear_init_state,
    mark_residual,
    merge_heads,
    split_heads,
)
from attnbench.plugins.attention.linear import feature_dim, options_of
from attnbench.plugins.kernels.fla_linear import FLA_OP, fla_linear_attention, fla_unavailable


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0, elementwise."""
    return F.elu(x).add_(1.0)  # same shape as x; in place: elu's backward keeps its input, not its output


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """Based's 2nd-order Taylor map: phi(q).phi(k) = 1 + q.k / sqrt(h) + (q.k)^2 / (2h) > 0."""
    h = x.shape[-1]
    x = x / h**0.25  # (..., h) so that q.k becomes q.k / sqrt(h)
    xs = x * 2.0**-0.25  # (..., h) each factor carries 2^(-1/4): the product's 1/sqrt(2), no pass over h^2
    outer = (xs[..., :, None] * xs[..., None, :]).flatten(-2)  # (..., h^2) x_a x_b / sqrt(2)
    return torch.cat([torch.ones_like(x[..., :1]), x, outer], dim=-1)  # (..., 1 + h + h^2)


def performer_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """FAVOR+ (Choromanski et al. 2021, positive random features): phi(x) = exp(w_m.x' -
    |x'|^2 / 2) / sqrt(m), x' = x / h^(1/4). Bounded by exp(|w_m|^2 / 2) since w.x' - |x'|^2/2
    <= |w|^2 / 2, so neither queries nor keys need a shift (a max over positions would
    leak; a per-row query shift would rescale eps)."""
    h, m = x.shape[-1], w.shape[0]
    x = x / h**0.25  # (..., h)
    proj = x @ w.to(x.dtype).T - 0.5 * (x * x).sum(-1, keepdim=True)  # (..., m) log features
    return torch.exp(proj) / math.sqrt(m)  # (..., m) > 0


def orthogonal_gaussian(m: int, h: int) -> torch.Tensor:
    """m x h rows: blocks of orthonormal rows scaled to chi(h) norms (FAVOR+'s ORF draw)."""
    blocks = []
    for _ in range(-(-m // h)):
        q, _ = torch.linalg.qr(torch.randn(h, h))  # (h, h) orthonormal columns
        blocks.append(q.T)
    norms = torch.randn(m, h).norm(dim=-1, keepdim=True)  # (m, 1) chi(h)
    return torch.cat(blocks)[:m] * norms  # (m, h)


class LinearAttention(nn.Module):
    features: torch.Tensor  # performer's feature matrix (m, h), a buffer

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
        self.n_head, self.chunk_size, self.eps = config.n_head, opts.chunk_size, opts.eps
        self.feature_map, self.kernel = opts.feature_map, opts.kernel
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))
        if self.feature_map == "performer":  # drawn once, never redrawn (see module docstring)
            h = config.head_dim
            self.register_buffer("features", orthogonal_gaussian(feature_dim("performer", h), h))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, chunk_size={self.chunk_size}, eps={self.eps:g}, feature_map={self.feature_map}"

    def describe_path(self) -> dict[str, object]:
        """What runs: recorded with every speed figure."""
        parallel = FLA_OP if self.kernel == "fla" else "chunked.linear_attention"
        return {
            "kernel": parallel,
            "decode_kernel": "chunked.linear_attention",
            "chunk_size": self.chunk_size,
            "feature_map": self.feature_map,
        }

    def _phi(self, x: torch.Tensor) -> torch.Tensor:
        """The feature map on (B, H, T, h) -> (B, H, T, F)."""
        if self.feature_map == "elu":
            return feature_map(x)
        if self.feature_map == "relu":
            return F.relu(x)
        if self.feature_map == "softmax":
            return torch.softmax(x, dim=-1)
        if self.feature_map == "taylor":
            return taylor_features(x)
        return performer_features(x, self.features)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = split_heads(self.c_attn(x), self.n_head)  # 3 x (B, H, T, h)
        # phi in fp32 (fp64 when given fp64): under autocast the projections are half precision.
        dt = torch.float64 if q.dtype == torch.float64 else torch.float32
        return self._phi(q.to(dt)), self._phi(k.to(dt)), v  # (B, H, T, F), (B, H, T, F), (B, H, T, h)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(y))  # (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fq, fk, v = self._heads(x)  # (B, H, T, F), (B, H, T, F), (B, H, T, h)
        if self.kernel == "fla":
            reason = fla_unavailable(x.device)
            if reason:  # never a silent fallback to the chunked kernel
                raise RuntimeError(f"linear attention kernel 'fla' cannot run: {reason}; use kernel: chunked")
            return self._merge(fla_linear_attention(fq, fk, v, self.eps))  # (B, T, D)
        y, _ = linear_attention(fq, fk, v, None, self.chunk_size, self.eps)  # (B, H, T, h) from the empty state
        return self._merge(y)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> LinearState:
        """Zero S and z. Kept in fp32 unless float64 is asked: they are running sums."""
        h = self.c_attn.out_features // 3 // self.n_head
        return linear_init_state(batch_size, self.n_head, feature_dim(self.feature_map, h), h, device, dtype)

    def step(self, x: torch.Tensor, state: LinearState) -> tuple[torch.Tensor, LinearState]:
        fq, fk, v = self._heads(x)  # (B, H, t, h)
        y, new = linear_attention(fq, fk, v, state, self.chunk_size, self.eps)  # (B, H, t, h)
        return self._merge(y), new


@torch.no_grad()
def attention_maps(mixer: LinearAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = phi(q_i).phi(k_j) / (sum_{j'<=i} phi(q_i).phi(k_j') + eps): (B, H, T, T)."""
    fq, fk, _ = mixer._heads(x)  # (B, H, T, h) phi in fp32
    a = (fq @ fk.transpose(-1, -2)).tril()  # (B, H, T, T) causal kernel values >= 0
    return a / (a.sum(-1, keepdim=True) + mixer.eps)  # (B, H, T, T) the eps as in forward
