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

Also here: ``LogAttention``, the variant's mixer for the shared backbone, its
``attention_maps`` (the equations and options are in ``attnbench.plugins.attention.heinsen``), and the mixer's
training path for sequences of one chunk (``log_attention_one_chunk``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

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
from attnbench.plugins.attention.heinsen import options_of

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


# ----------------------------------------------------------------------------- one-chunk training path

# The stabilisers of attnbench.kernels.chunked.log_attention (its LEVEL, LEVEL_K, HEADROOM and
# CUT; tests/test_heinsen_chunked.py checks they are the same): the path below is that
# kernel's arithmetic for one chunk from the empty state.
LEVEL, LEVEL_K, HEADROOM = 40.0, 5.0, 20.0
CUT = {torch.float32: 70.0, torch.float64: 700.0}
ONE_CHUNK_KERNEL = "heinsen_model.log_attention_one_chunk"
CHUNKED_KERNEL = "chunked.log_attention"


def _running_max(x: torch.Tensor) -> torch.Tensor:
    """max over positions <= t along dim -2: (..., T, e) -> (..., T, e); log2 T maxima of
    shifted copies (exact, and faster than cummax at T <= 64)."""
    T, s = x.shape[-2], 1
    while s < T:
        y = x.clone()  # (..., T, e)
        torch.maximum(x[..., s:, :], x[..., :-s, :], out=y[..., s:, :])
        x, s = y, 2 * s
    return x


class _LogOneChunk(torch.autograd.Function):
    """Heinsen's attention for T <= chunk from the empty state, ``log_attention``'s
    arithmetic for one chunk with the carried state and the state after T left out (they
    are empty, or not wanted, in training), and a hand-written backward:

        kappa_j = max_d k_jd,  k~ = k - kappa,  log V~ = [log V, 0] + kappa   (detached kappa)
        m = running max of k~,  row_i = max_d(q_id + m_id) - HEADROOM          (detached)
        A_ij = sum_d exp(q_id + r_d - row_i) exp(k~_jd - r_d),  j <= i         (key levels r)
        num_ie = sum_j A_ij exp(log V~_je - u_ie),  o = log num[:h_v] - log num[h_v]   (value levels u)

    with the kernel's levels (key references LEVEL_K apart, value references LEVEL apart,
    each row at its own) and cuts (no gradient through query factors, pair weights or
    numerators below exp(-CUT + HEADROOM)). fp32, or float64 when given float64; inputs
    (B, H, T, h) of one dtype.
    """

    @staticmethod
    def forward(ctx, q, k, log_v):
        dt, (T, hv) = q.dtype, log_v.shape[-2:]
        cut = CUT[dt] - HEADROOM  # the kernel's cut_row: CUT below the row's largest term
        low, ninf = math.exp(-cut), float("-inf")
        q, k, log_v = q.contiguous(), k.contiguous(), log_v.contiguous()
        kappa = k.amax(dim=-1, keepdim=True)  # (B, H, T, 1) per key token
        kt = k - kappa  # (B, H, T, h_k) k~ <= 0
        lv = F.pad(log_v, (0, 1)) + kappa  # (B, H, T, h_v+1) log V~, kappa for z
        mk = _running_max(kt)  # (B, H, T, h_k)
        row = (q + mk).amax(dim=-1, keepdim=True) - HEADROOM  # (B, H, T, 1) L_i - HEADROOM
        base = mk[..., :1, :]  # (B, H, 1, h_k) m at the first position
        # each (row, channel) at one level; the last row's are the highest (m only grows)
        top = int(torch.div(mk[..., -1:, :] - base, LEVEL_K, rounding_mode="floor").max())  # usually 0 or 1
        level = torch.div(mk - base, LEVEL_K, rounding_mode="floor") if top else None  # (B, H, T, h_k)
        keys, parts = [], []
        for lvl in range(top + 1):
            ref = base + lvl * LEVEL_K  # (B, H, 1, h_k)
            q_log = q + ref - row  # (B, H, T, h_k) <= HEADROOM at the row's level
            if level is not None:
                q_log = q_log.masked_fill(level != lvl, ninf)
            q_f = torch.exp(q_log)  # (B, H, T, h_k)
            k_f = torch.exp((kt - ref).clamp_max(LEVEL_K))  # (B, H, T, h_k) cap hits only j > i
            parts.append(q_f @ k_f.transpose(-1, -2))  # (B, H, T, T)
            keys += [q_log, q_f, k_f]
        scores = sum(parts[1:], parts[0])  # (B, H, T, T) levels summed in order, as the kernel
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # (T, T) j > i
        scores = scores.masked_fill_(future, 0.0)  # (B, H, T, T) causal, x exp(HEADROOM - L_i)
        base_v = lv[..., :1, :]  # (B, H, 1, h_v+1) the first position
        top_v = int(torch.div(lv.amax(dim=-2, keepdim=True) - base_v, LEVEL, rounding_mode="floor").max())
        level_v = None  # (B, H, T, h_v+1) each row's value level, where any is above 0 (rare)
        if top_v:
            level_v = torch.div(_running_max(lv) - base_v, LEVEL, rounding_mode="floor")
        values = [torch.exp((lv - base_v).clamp_max(LEVEL))]  # (B, H, T, h_v+1) cap hits only j > i
        num = scores @ values[0]  # (B, H, T, h_v+1)
        for lvl in range(1, top_v + 1):
            values.append(torch.exp((lv - (base_v + lvl * LEVEL)).clamp_max(LEVEL)))  # (B, H, T, h_v+1)
            num = torch.where(level_v == lvl, scores @ values[-1], num)  # (B, H, T, h_v+1)
        # log num, as the kernel's _cut_log(num, cut, HEADROOM): finer near 0 than near HEADROOM
        scaled = num * math.exp(-HEADROOM)  # (B, H, T, h_v+1)
        near_0 = scaled > low
        log_num = torch.where(near_0, scaled, num.clamp_min(torch.finfo(dt).tiny)).log() - torch.where(
            near_0, 0.0, HEADROOM
        )  # (B, H, T, h_v+1)
        log_num = log_num + (base_v if level_v is None else base_v + level_v * LEVEL)  # L_i cancels in o
        ctx.top, ctx.cut = top, cut
        ctx.save_for_backward(scores, num, level_v, *keys, *values)
        return log_num[..., :hv] - log_num[..., hv:]  # (B, H, T, h_v)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_o):
        scores, num, level_v, *rest = ctx.saved_tensors
        keys, values = rest[: 3 * (ctx.top + 1)], rest[3 * (ctx.top + 1) :]
        low = math.exp(-ctx.cut)
        d_log = torch.cat([d_o, -d_o.sum(dim=-1, keepdim=True)], dim=-1)  # (B, H, T, h_v+1)
        d_num = torch.where(num > low, d_log / num, 0.0)  # (B, H, T, h_v+1) the cut of log num
        d_scores, d_lv = [], []
        for lvl, v_f in enumerate(values):  # each row at its own value level
            d_part = d_num if level_v is None else d_num.masked_fill(level_v != lvl, 0.0)  # (B, H, T, h_v+1)
            d_scores.append(d_part @ v_f.transpose(-1, -2))  # (B, H, T, T)
            d_lv.append((scores.transpose(-1, -2) @ d_part) * v_f)  # (B, H, T, h_v+1)
        d_s = torch.where(scores > low, sum(d_scores[1:], d_scores[0]), 0.0)  # (B, H, T, T) the cut; future: 0
        d_q, d_k = [], []
        for lvl in range(ctx.top + 1):
            q_log, q_f, k_f = keys[3 * lvl : 3 * lvl + 3]
            d_q.append(torch.where(q_log > -ctx.cut, (d_s @ k_f) * q_f, 0.0))  # (B, H, T, h_k)
            d_k.append((d_s.transpose(-1, -2) @ q_f) * k_f)  # (B, H, T, h_k)
        d_log_v = sum(d_lv[1:], d_lv[0])[..., : d_o.shape[-1]]  # (B, H, T, h_v) kappa is detached
        return sum(d_q[1:], d_q[0]), sum(d_k[1:], d_k[0]), d_log_v


def log_attention_one_chunk(q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor) -> torch.Tensor:
    """``log_attention(q, k, log_v, empty state, chunk)[0]`` for T <= chunk, its arithmetic
    without the state (see ``_LogOneChunk``): q, k (B, H, T, h_k), log_v (B, H, T, h_v) ->
    o (B, H, T, h_v) in log_v's dtype; fp32, float64 when given float64, autocast off."""
    dt = torch.float64 if torch.float64 in (q.dtype, k.dtype, log_v.dtype) else torch.float32
    with torch.autocast(q.device.type, enabled=False):
        o = _LogOneChunk.apply(q.to(dt), k.to(dt), log_v.to(dt))  # (B, H, T, h_v)
    return o.to(log_v.dtype)


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


def build_model(config: ModelConfig) -> HeinsenLM:
    """The variant's own model (``Variant.build_model``), chunked as its options say."""
    return HeinsenLM(config, options_of(config).chunk_size)


# ----------------------------------------------------------------------------- backbone mixer


class LogAttention(nn.Module):
    one_chunk_path = True  # False: every forward runs the chunked kernel (A/B benchmarks, tests)

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.n_head, self.chunk_size = config.n_head, options_of(config).chunk_size
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))
        self.last_kernel: str | None = None  # the training forward's path, for describe_path

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, chunk_size={self.chunk_size}"

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_heads(self.c_attn(x), self.n_head)  # q, k, log v: 3 x (B, H, T, h)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        return self.c_proj(merge_heads(y))  # (B, T, D) from the log-output

    def describe_path(self) -> dict[str, object]:
        """What runs: recorded with every speed figure. A forward of T <= chunk_size runs the
        one-chunk path, a longer one the chunked kernel (the last forward's is named)."""
        return {
            "kernel": self.last_kernel or f"{ONE_CHUNK_KERNEL} (T <= chunk_size), else {CHUNKED_KERNEL}",
            "decode_kernel": CHUNKED_KERNEL,
            "chunk_size": self.chunk_size,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, log_v = self._heads(x)  # (B, H, T, h)
        B, H, T, h = q.shape
        if self.one_chunk_path and self.chunk_size >= T:  # one chunk from the empty state: no state formed
            self.last_kernel = ONE_CHUNK_KERNEL
            return self._merge(log_attention_one_chunk(q, k, log_v))  # (B, T, D)
        self.last_kernel = CHUNKED_KERNEL
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
