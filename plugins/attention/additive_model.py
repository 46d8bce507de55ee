"""mtanghu's causal Fastformer layer (spec section 2.3) and his whole language model (2.4).

``FastSelfAttention`` is the token mixer used in the shared backbone (whose block already
applies LN1, so ``pre_norm=False`` there) and, with its own ``attn_norm``, inside
``FastformerLM``, the reference model of leap-transformer 0.1.1 (commit b587c27). The builders
at the end are what ``attnbench.plugins.attention.additive`` (the options and the registration)
names for ``additive`` and ``windowed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import LanguageModel, ModelConfig, ModelOutput, embed_with_positions, lm_loss
from attnbench.plugins.attention.additive import (
    AdditiveOptions,
    WindowedOptions,
    additive_windows,
    options_of,
    windowed_windows,
)
from attnbench.plugins.kernels.additive import compute_dtype, normalise, pool, step_global, step_window
from attnbench.plugins.kernels.additive_spec import PoolSpec


@dataclass(frozen=True)
class AdditiveState:
    """Decode state of one layer: per pooling either running sums [S, Z] (B, H, h+1) of
    e^{a-s} x^ and e^{a-s} (global), or the last k such entries (B, k, H, h+1) (windowed)."""

    query: torch.Tensor  # query pooling
    key: torch.Tensor  # key pooling


class FastSelfAttention(nn.Module):
    """Causal additive attention, per head (h = D / H, no output projection, no bias):

        gq_i = Pool_k(norm(Q_i), s norm(Q_i).norm(w_q) / h)      P_i = gq_i * K_i
        gk_i = Pool_k(norm(P_i), s norm(P_i).norm(w_k) / h)      y_i = gk_i * V_i

    Pool_k averages over the k tokens up to and including i, weighted by e^{logit}
    (see ``attnbench.plugins.kernels.additive``); k >= T pools over the whole prefix.
    """

    def __init__(self, config: ModelConfig, window: int, spec: PoolSpec, pre_norm: bool) -> None:
        super().__init__()
        d, H = config.d_model, config.n_head
        if config.head_dim < 2:
            raise ValueError(
                f"additive attention needs a head size >= 2 (unbiased std over the head); "
                f"got d_model {d} / n_head {H} = {config.head_dim}"
            )
        self.n_head, self.window, self.spec, self.context = H, window, spec, config.context
        self.attn_norm = nn.LayerNorm(d) if pre_norm else nn.Identity()
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.query_attn = nn.Parameter(torch.randn(H, d // H) * 0.02)  # (H, h) w_q
        self.key_attn = nn.Parameter(torch.randn(H, d // H) * 0.02)  # (H, h) w_k
        self.drop = nn.Dropout(config.dropout)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, D = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(D, dim=2)  # 3 x (B, T, D)
        shape = (B, T, self.n_head, D // self.n_head)
        return q.view(shape), k.view(shape), v.view(shape)  # 3 x (B, T, H, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)  # (B, T, H, h)
        gq = self.drop(pool(q, self.query_attn, self.spec, self.window))  # (B, T, H, h) fp32
        gk = self.drop(pool(gq * k, self.key_attn, self.spec, self.window))  # (B, T, H, h) fp32
        return (gk * v).to(v.dtype).flatten(2)  # (B, T, D)

    def uses_buffer(self, max_len: int) -> bool:
        """Decoding keeps the last k entries only when the window can actually slide."""
        return self.window < min(max_len, self.context)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> AdditiveState:
        H, h = self.n_head, self.qkv.in_features // self.n_head
        dtype = compute_dtype(dtype or self.qkv.weight.dtype)  # sums are kept in fp32
        shape = (batch_size,) + ((self.window,) if self.uses_buffer(max_len) else ()) + (H, h + 1)
        return AdditiveState(
            torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)
        )

    def step(self, x: torch.Tensor, state: AdditiveState) -> tuple[torch.Tensor, AdditiveState]:
        q, k, v = self._qkv(x)  # (B, t, H, h)
        if state.query.dim() == 4:  # windowed: (B, k, H, h+1) buffers
            gq, sq = step_window(q, self.query_attn, self.spec, self.window, state.query)
            gq = self.drop(gq)  # (B, t, H, h)
            gk, sk = step_window(gq * k, self.key_attn, self.spec, self.window, state.key)
        else:  # global: (B, H, h+1) running sums
            gq, sq = step_global(q, self.query_attn, self.spec, state.query)
            gq = self.drop(gq)  # (B, t, H, h)
            gk, sk = step_global(gq * k, self.key_attn, self.spec, state.key)
        y = (self.drop(gk) * v).to(v.dtype).flatten(2)  # (B, t, D)
        return y, AdditiveState(sq, sk)


class FastformerBlock(nn.Module):
    """u <- u + FastSelfAttention(u) (its own pre-LN inside);  u <- u + Drop(W_down GELU(W_up LN(u)))."""

    def __init__(self, config: ModelConfig, window: int, spec: PoolSpec) -> None:
        super().__init__()
        d, hidden = config.d_model, config.mlp_ratio * config.d_model
        self.attn = FastSelfAttention(config, window, spec, pre_norm=True)
        self.mlp_norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.drop = nn.Dropout(config.dropout)

    def _mlp(self, u: torch.Tensor) -> torch.Tensor:
        return u + self.drop(self.down(F.gelu(self.up(self.mlp_norm(u)))))  # (B, T, D) exact GELU

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self._mlp(u + self.attn(u))  # (B, T, D)

    def step(self, u: torch.Tensor, state: AdditiveState) -> tuple[torch.Tensor, AdditiveState]:
        y, state = self.attn.step(u, state)  # (B, t, D)
        return self._mlp(u + y), state


@dataclass(frozen=True)
class FastformerState:
    pos: int  # tokens consumed so far
    layers: tuple[AdditiveState, ...]


class FastformerLM(LanguageModel):
    """mtanghu's causal Fastformer LM (b587c27): token + learned position embeddings, Dropout,
    L FastformerBlocks, final LN, ``proj_logits`` tied to the token embedding with its own
    bias. Init N(0, 0.02) for Linear and Embedding weights, zero biases, no residual scaling."""

    def __init__(self, config: ModelConfig, windows: tuple[int, ...], spec: PoolSpec) -> None:
        super().__init__()
        if len(windows) != config.n_layer:
            raise ValueError(f"{len(windows)} windows given for {config.n_layer} layers")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(FastformerBlock(config, k, spec) for k in windows)
        self.ln_f = nn.LayerNorm(config.d_model)
        self.proj_logits = nn.Linear(config.d_model, config.vocab_size)  # keeps its bias
        self.proj_logits.weight = self.wte.weight  # tied
        self.apply(self._init_weights)  # query_attn / key_attn keep their randn * 0.02

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        return embed_with_positions(self, idx, start)  # (B, T, D)

    def _blocks(self) -> list[FastformerBlock]:
        return cast(list[FastformerBlock], list(self.layers))  # an nn.ModuleList is typed by Module

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> ModelOutput:
        u = self._embed(idx, 0)  # (B, T, D)
        for layer in self.layers:
            u = layer(u)  # (B, T, D)
        return lm_loss(self.proj_logits(self.ln_f(u)), targets)  # logits (B, T, V)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> FastformerState:
        device = device or self.wte.weight.device
        dtype = dtype or self.wte.weight.dtype
        return FastformerState(
            0, tuple(layer.attn.init_state(batch_size, max_len, device=device, dtype=dtype) for layer in self._blocks())
        )

    def step(self, idx: torch.Tensor, state: Any) -> tuple[torch.Tensor, FastformerState]:
        u = self._embed(idx, state.pos)  # (B, t, D)
        new_layers = []
        for layer, layer_state in zip(self._blocks(), state.layers, strict=True):
            u, layer_state = layer.step(u, layer_state)  # (B, t, D)
            new_layers.append(layer_state)
        logits = self.proj_logits(self.ln_f(u))  # (B, t, V)
        return logits, FastformerState(state.pos + idx.size(1), tuple(new_layers))


@torch.no_grad()
def attention_maps(mixer: FastSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Per-token importance alpha_j of the query pooling (the seeds' alpha): logits
    a_j = s norm(q_j).norm(w_q) / h, normalised over the whole sequence (the weights the
    last position pools with under global pooling): (B, H, T)."""
    q, _, _ = mixer._qkv(x)  # (B, T, H, h)
    q_hat, _ = normalise(q.float().clone())  # (B, T, H, h)
    w_hat, _ = normalise(mixer.query_attn.float())  # (H, h)
    a = mixer.spec.rescale * (q_hat * w_hat).sum(-1) / q.size(-1)  # (B, T, H) |a| < s
    return a.transpose(1, 2).softmax(-1)  # (B, H, T) sums to 1 over tokens


def build_additive_mixer(config: ModelConfig, layer_idx: int) -> FastSelfAttention:
    spec = options_of(config, AdditiveOptions).pool_spec()
    return FastSelfAttention(config, additive_windows(config)[layer_idx], spec, pre_norm=False)


def build_windowed_mixer(config: ModelConfig, layer_idx: int) -> FastSelfAttention:
    spec = options_of(config, WindowedOptions).pool_spec()
    return FastSelfAttention(config, windowed_windows(config)[layer_idx], spec, pre_norm=False)


def build_additive_model(config: ModelConfig) -> FastformerLM:
    return FastformerLM(config, additive_windows(config), options_of(config, AdditiveOptions).pool_spec())


def build_windowed_model(config: ModelConfig) -> FastformerLM:
    return FastformerLM(config, windowed_windows(config), options_of(config, WindowedOptions).pool_spec())
