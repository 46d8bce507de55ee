"""The Based mixer (the equations and the registration are in ``based``): the module, its
decode state, the fla path and the attention maps."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbench import LinearState, ModelConfig, linear_init_state, mark_residual, merge_heads, split_heads
from attnbench.plugins.recurrent.based import FLA_TAYLOR_OP, n_features, options_of
from attnbench.plugins.recurrent.common import require_fla
from attnbench.plugins.recurrent.taylor_kernel import taylor_attention, taylor_scores
from attnbench.plugins.recurrent.window_kernel import (
    FLA_WINDOW_OP,
    SDPA_BLOCKED_OP,
    SHORT_WINDOW_OP,
    WindowCache,
    fla_window_attention,
    window_attention,
    window_init_cache,
    window_weights,
)


@dataclass(frozen=True)
class BasedState:
    linear: LinearState  # S (B, H, F, h), z (B, H, F), F = 1 + f + f^2
    window: WindowCache  # the last min(T, w - 1) keys and values (B, H, P, h)


class Based(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
        self.n_head, self.head_dim, self.feature_dim = config.n_head, config.head_dim, opts.feature_dim
        self.window, self.chunk_size, self.eps, self.kernel = opts.window, opts.chunk_size, opts.eps, opts.kernel
        self.c_feat = nn.Linear(config.d_model, 2 * config.n_head * opts.feature_dim, bias=config.bias)  # q~, k~
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)  # q, k (window), v (shared)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def extra_repr(self) -> str:
        return (
            f"n_head={self.n_head}, feature_dim={self.feature_dim}, window={self.window}, "
            f"chunk_size={self.chunk_size}, kernel={self.kernel}"
        )

    def describe_path(self) -> dict[str, object]:
        fla = self.kernel == "fla"
        return {
            "kernel": f"{FLA_TAYLOR_OP} + {FLA_WINDOW_OP}"
            if fla
            else "recurrent.taylor_kernel.taylor_attention + recurrent.window_kernel.window_attention",
            "decode_kernel": "recurrent.taylor_kernel.taylor_attention + recurrent.window_kernel.window_attention",
            "chunk_size": self.chunk_size,
            "window": self.window,
            "feature_dim": self.feature_dim,
            "window_kernel_up_to_window": FLA_WINDOW_OP if fla else SHORT_WINDOW_OP,  # training, T <= window
            "window_kernel_blocks": FLA_WINDOW_OP if fla else SDPA_BLOCKED_OP,  # inside window_attention
        }

    def _heads(self, x: torch.Tensor):
        """(q~, k~) (B, H, T, f) and q, k, v (B, H, T, h)."""
        B, T, _ = x.shape
        qf, kf = self.c_feat(x).view(B, T, 2, self.n_head, self.feature_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, f) each
        q, k, v = split_heads(self.c_attn(x), self.n_head)  # (B, H, T, h) each
        return qf, kf, q, k, v

    def _mix(self, x: torch.Tensor, state: BasedState) -> tuple[torch.Tensor, BasedState]:
        qf, kf, q, k, v = self._heads(x)  # (B, H, t, f) x 2, (B, H, t, h) x 3
        lin, lin_state = taylor_attention(qf, kf, v, state.linear, self.chunk_size, self.eps)  # (B, H, t, h)
        swa, cache = window_attention(q, k, v, state.window, self.window, self.chunk_size)  # (B, H, t, h)
        return self._combine(lin, swa), BasedState(lin_state, cache)  # (B, t, D)

    def _combine(self, lin: torch.Tensor, swa: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(0.5 * (lin + swa)))  # (B, t, D) the two parts' mean, projected

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel == "fla":
            require_fla("based", x)
        qf, kf, q, k, v = self._heads(x)  # (B, H, T, f) x 2, (B, H, T, h) x 3
        if self.kernel == "fla":
            lin = fla_taylor_attention(qf, kf, v)  # (B, H, T, h)
            swa = fla_window_attention(q, k, v, self.window)  # (B, H, T, h)
        else:  # from the empty state and cache
            lin, _ = taylor_attention(qf, kf, v, None, self.chunk_size, self.eps)  # (B, H, T, h)
            cache = window_init_cache(x.shape[0], self.n_head, self.head_dim, x.device, x.dtype)
            swa, _ = window_attention(q, k, v, cache, self.window, self.chunk_size)  # (B, H, T, h)
        return self._combine(lin, swa)  # (B, T, D)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> BasedState:
        """Zero S and z (fp32 unless float64 is asked) and an empty window cache."""
        lin = linear_init_state(batch_size, self.n_head, n_features(self.feature_dim), self.head_dim, device, dtype)
        return BasedState(lin, window_init_cache(batch_size, self.n_head, self.head_dim, device, dtype))

    def step(self, x: torch.Tensor, state: BasedState) -> tuple[torch.Tensor, BasedState]:
        return self._mix(x, state)


def fla_taylor_attention(qf: torch.Tensor, kf: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The Taylor part through fla's parallel_based (its eps is 1e-6 too), from S = 0."""
    from fla.ops.based import parallel_based

    q, k, vv = (t.transpose(1, 2).contiguous().to(v.dtype) for t in (qf, kf, v))  # (B, T, H, .) fla's layout
    o = parallel_based(q, k, vv, scale=qf.shape[-1] ** -0.5, use_norm=True)  # (B, T, H, h)
    return o.transpose(1, 2)  # (B, H, T, h)


@torch.no_grad()
def attention_maps(mixer: Based, x: torch.Tensor) -> torch.Tensor:
    """The weights y applies to the shared values: (A_lin + A_swa) / 2, rows sum to 1 (up to
    the eps): (B, H, T, T)."""
    qf, kf, q, k, _ = mixer._heads(x)
    a = taylor_scores(qf.float(), kf.float())  # (B, H, T, T) phi(q_i).phi(k_j) for j <= i, > 0
    lin = a / (a.sum(-1, keepdim=True) + mixer.eps)  # (B, H, T, T)
    return 0.5 * (lin + window_weights(q, k, mixer.window))  # (B, H, T, T)
