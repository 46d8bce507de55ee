"""The softmax attention mixer (torch); registered by ``attnbench.plugins.attention.softmax``.

y = softmax(Q K^T / sqrt(h) + M_causal) V,  then W_o    (per head, h = D / H)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, mark_residual, merge_heads, split_heads


@dataclass(frozen=True)
class KVCache:
    k: torch.Tensor  # (B, H, max_len, h) preallocated; slots >= length are unused
    v: torch.Tensor  # (B, H, max_len, h)
    length: int  # positions filled


class SoftmaxAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_heads(self.c_attn(x), self.n_head)  # 3 x (B, H, T, h)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(y))  # (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._heads(x)  # (B, H, T, h)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, H, T, h)
        return self._merge(y)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> KVCache:
        h = self.c_attn.out_features // 3 // self.n_head
        shape = (batch_size, self.n_head, max_len, h)
        return KVCache(
            torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype), 0
        )

    def step(self, x: torch.Tensor, state: KVCache) -> tuple[torch.Tensor, KVCache]:
        q, k, v = self._heads(x)  # (B, H, t, h)
        t, start = x.size(1), state.length
        end = start + t
        if end > state.k.size(2):
            raise ValueError(f"KV cache holds {state.k.size(2)} positions; step needs {end}")
        # Write the new keys/values into the preallocated slots [start, end).
        state.k[:, :, start:end] = k.to(state.k.dtype)
        state.v[:, :, start:end] = v.to(state.v.dtype)
        keys, values = state.k[:, :, :end], state.v[:, :, :end]  # (B, H, end, h)
        mask = None
        if t > 1:  # query i (absolute start+i) sees keys j <= start+i
            qpos = torch.arange(start, end, device=x.device)[:, None]  # (t, 1)
            mask = torch.arange(end, device=x.device)[None, :] <= qpos  # (t, end)
        y = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask)
        return self._merge(y), KVCache(state.k, state.v, end)


@torch.no_grad()
def attention_maps(mixer: SoftmaxAttention, x: torch.Tensor) -> torch.Tensor:
    """P = softmax(Q K^T / sqrt(h) + M_causal), the weights SDPA applies: (B, H, T, T)."""
    q, k, _ = mixer._heads(x)  # (B, H, T, h)
    T = q.size(2)
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.size(-1) ** 0.5  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # (T, T) j > i
    return scores.masked_fill(future, float("-inf")).softmax(-1)  # (B, H, T, T) rows sum to 1
