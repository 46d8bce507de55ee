"""Heinsen's reference language model (glassroom/heinsen_attention, generative_language_model.py),
re-implemented from the spec (shared/design/variants.md, 5.3) with the bugs of 5.4 absent.

    x = E[idx] + log x_t,   x_t = sigmoid(a_t) x_{t-1} + exp(l_t),  x_0 = 1,  (a, l) = W_p E[idx] + b_p
    per layer:  x <- x + W_3 GLU(W_2 LogAttention(split(W_1 LN(x))) + b_2)
    logits = LN_f(x) E^T                                   (tied head, no dropout, no MLP)

Differences from the reference, all fixes: ``repr`` works; decoding state is an explicit
value (EmbedPosition's last log x_t and each layer's log-space LogState, each tensor
owning only its own storage) instead of module attributes holding a view of a
[B, H, T, h_k, h_v] tensor; the position recurrence and the attention run in fp32 in eval
too, and the recurrence never forms an unbounded cumulative sum (see ``log_linear_scan``).

Also here: ``LogAttention``, the variant's mixer for the shared backbone, and its
``attention_maps`` (the equations are in ``attnbench.plugins.heinsen``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import (
    LanguageModel,
    LogState,
    ModelConfig,
    ModelOutput,
    lm_loss,
    log_attention,
    log_init_state,
    mark_residual,
    merge_heads,
    split_heads,
)
from attnbench.plugins.heinsen import _options

# Positions per chunk of the position recurrence: within a chunk the log-decay is summed
# over at most this many steps, so its fp32 rounding stays bounded whatever T is.
POSITION_CHUNK = 32


def log_linear_scan(
    log_a: torch.Tensor, log_b: torch.Tensor, log_x0: torch.Tensor, chunk: int = POSITION_CHUNK
) -> torch.Tensor:
    """log x_t for x_t = exp(log_a_t) x_{t-1} + exp(log_b_t), from log x_0; fp32.

    log_a, log_b (B, T, d), log_a <= 0; log_x0 (B, d). Within a chunk (arXiv 2311.06281):
    log x_t = A_t + logaddexp(log x_start, LCSE_{s<=t}(log_b_s - A_s)), A_t = sum of log_a
    from the chunk start to t (at most ``chunk`` terms: no unbounded cumsum); the chunk-end
    values are carried across chunks one (B, d) step at a time. Returns (B, T, d).
    """
    B, T, d = log_a.shape
    c = min(chunk, T)
    N = -(-T // c)
    pad = (0, 0, 0, N * c - T)  # padded tail positions are dropped; zeros keep them finite
    dt = torch.float64 if log_a.dtype == torch.float64 else torch.float32  # fp64 for reference runs
    la = F.pad(log_a.to(dt), pad).view(B, N, c, d)  # (B, N, c, d)
    lb = F.pad(log_b.to(dt), pad).view(B, N, c, d)  # (B, N, c, d)
    A = la.cumsum(dim=2)  # (B, N, c, d) within-chunk log-decay, bounded length
    inner = A + torch.logcumsumexp(lb - A, dim=2)  # (B, N, c, d) the chunk's own inputs, x_start = 0
    starts = [log_x0.to(dt)]  # log x before each chunk, (B, d) each
    for n in range(N - 1):
        starts.append(torch.logaddexp(A[:, n, -1] + starts[-1], inner[:, n, -1]))  # (B, d)
    start = torch.stack(starts, dim=1)  # (B, N, d)
    log_x = torch.logaddexp(A + start[:, :, None], inner)  # (B, N, c, d)
    return log_x.reshape(B, N * c, d)[:, :T]  # (B, T, d)


class EmbedPosition(nn.Module):
    """Learned log-linear position recurrence: x + log x_t (spec 5.3)."""

    def __init__(self, d_emb: int) -> None:
        super().__init__()
        self.d_emb = d_emb
        self.proj = nn.Linear(d_emb, 2 * d_emb)

    def extra_repr(self) -> str:
        return f"d_emb={self.d_emb}"

    def forward(self, x: torch.Tensor, log_x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, d), log_x0 (B, d) -> x + log x_t (B, T, d), last log x_t (B, d)."""
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        a, log_b = self.proj(x).to(dt).chunk(2, dim=-1)  # (B, T, d) each, fp32 (fp64) for the scan
        with torch.autocast(x.device.type, enabled=False):  # fp32 in train and eval alike
            log_x = log_linear_scan(F.logsigmoid(a), log_b, log_x0)  # (B, T, d)
        return x + log_x.to(x.dtype), log_x[:, -1].contiguous()


class ResidualLayer(nn.Module):
    """x + W_3 GLU(W_2 LogAttention(q, k, log V) + b_2), q, k, log V = split(W_1 LN(x) + b_1)."""

    def __init__(self, d_emb: int, n_head: int, d_k: int, d_v: int, chunk_size: int) -> None:
        super().__init__()
        self.n_head, self.d_k, self.d_v, self.chunk_size = n_head, d_k, d_v, chunk_size
        self.norm = nn.LayerNorm(d_emb)
        self.qkv = nn.Linear(d_emb, n_head * (2 * d_k + d_v))
        self.glu_in = nn.Linear(n_head * d_v, 2 * d_emb)
        self.out = nn.Linear(d_emb, d_emb, bias=False)

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, d_k={self.d_k}, d_v={self.d_v}, chunk_size={self.chunk_size}"

    def init_state(self, batch_size: int, device=None, dtype=None) -> LogState:
        return log_init_state(batch_size, self.n_head, self.d_k, self.d_v, device, dtype)

    def forward(self, x: torch.Tensor, state: LogState) -> tuple[torch.Tensor, LogState]:
        B, T, _ = x.shape
        h = self.qkv(self.norm(x)).view(B, T, self.n_head, -1).transpose(1, 2)  # (B, H, T, 2 d_k + d_v)
        q, k, log_v = h.split((self.d_k, self.d_k, self.d_v), dim=-1)  # (B, H, T, d_k|d_k|d_v)
        y, state = log_attention(q, k, log_v, state, self.chunk_size)  # (B, H, T, d_v) log of the mixture
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.d_v)  # (B, T, H d_v)
        return x + self.out(F.glu(self.glu_in(y), dim=-1)), state  # (B, T, d)


@dataclass(frozen=True)
class HeinsenLMState:
    log_x: torch.Tensor  # (B, d) EmbedPosition's last log x_t; 0 before any token (x_0 = 1)
    layers: tuple[LogState, ...]  # one per ResidualLayer


class HeinsenLM(LanguageModel):
    """The reference model: d_k = d_v = d_model / n_head; context, mlp_ratio, dropout and
    bias of the config do not apply (no positions table, no MLP, no dropout, biases as
    in the reference). At vocab 50304, d 768, 24 layers, 24 heads: 124,879,872 parameters.
    """

    def __init__(self, config: ModelConfig, chunk_size: int) -> None:
        super().__init__()
        self.config = config
        d, H = config.d_model, config.n_head
        self.embed = nn.Embedding(config.vocab_size, d)
        self.embed_pos = EmbedPosition(d)
        self.layers = nn.ModuleList(
            ResidualLayer(d, H, config.head_dim, config.head_dim, chunk_size) for _ in range(config.n_layer)
        )
        self.norm = nn.LayerNorm(d)
        nn.init.uniform_(self.embed.weight, -1.0 / math.sqrt(d), 1.0 / math.sqrt(d))

    def init_state(self, batch_size, max_len, device=None, dtype=None) -> HeinsenLMState:
        """Fresh state; fp32 unless float64 is asked (running sums and log x)."""
        device = device or self.embed.weight.device
        dt = torch.float64 if dtype == torch.float64 else torch.float32
        return HeinsenLMState(
            torch.zeros(batch_size, self.config.d_model, device=device, dtype=dt),  # (B, d)
            tuple(cast(ResidualLayer, layer).init_state(batch_size, device, dt) for layer in self.layers),
        )

    def step(self, idx: torch.Tensor, state: HeinsenLMState) -> tuple[torch.Tensor, HeinsenLMState]:
        """idx (B, t) -> logits (B, t, V) and a new state (the given one is not modified)."""
        x, log_x = self.embed_pos(self.embed(idx), state.log_x)  # (B, t, d), (B, d)
        layers = []
        for layer, layer_state in zip(self.layers, state.layers, strict=True):
            x, layer_state = layer(x, layer_state)  # (B, t, d)
            layers.append(layer_state)
        logits = F.linear(self.norm(x), self.embed.weight)  # (B, t, V) tied head, no bias
        return logits, HeinsenLMState(log_x, tuple(layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> ModelOutput:
        state = self.init_state(idx.size(0), idx.size(1), idx.device, self.embed.weight.dtype)
        logits, _ = self.step(idx, state)  # (B, T, V)
        return lm_loss(logits, targets)


# ----------------------------------------------------------------------------- backbone mixer


class LogAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.n_head, self.chunk_size = config.n_head, _options(config).chunk_size
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, chunk_size={self.chunk_size}"

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_heads(self.c_attn(x), self.n_head)  # q, k, log v: 3 x (B, H, T, h)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(y))  # (B, T, D) from the log-output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, log_v = self._heads(x)  # (B, H, T, h)
        B, H, _, h = q.shape
        y, _ = log_attention(
            q, k, log_v, log_init_state(B, H, h, h, x.device, q.dtype), self.chunk_size
        )  # (B, H, T, h)
        return self._merge(y)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> LogState:
        """Empty state (log sums -inf); fp32 unless float64 is asked: running sums."""
        h = self.c_attn.out_features // 3 // self.n_head
        return log_init_state(batch_size, self.n_head, h, h, device, dtype)

    def step(self, x: torch.Tensor, state: LogState) -> tuple[torch.Tensor, LogState]:
        q, k, log_v = self._heads(x)  # (B, H, t, h)
        y, new = log_attention(q, k, log_v, state, self.chunk_size)  # (B, H, t, h)
        return self._merge(y), new


@torch.no_grad()
def attention_maps(mixer: LogAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = softmax_{j<=i}(LSE_d(q_id + k_jd)) (linear attention with
    phi = exp): (B, H, T, T)."""
    q, k, _ = mixer._heads(x)  # (B, H, T, h)
    T = q.size(2)
    s = torch.logsumexp(q.float()[:, :, :, None, :] + k.float()[:, :, None, :, :], -1)  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # (T, T) j > i
    return s.masked_fill(future, float("-inf")).softmax(-1)  # (B, H, T, T) max-shifted exp
