"""The gated linear attention mixer (the equations and the registration are in ``gla``): the
module and its implied attention maps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, mark_residual, merge_heads
from attnbench.plugins.recurrent.common import HeadRMSNorm, full_precision_linear, require_fla
from attnbench.plugins.recurrent.fla_ops import FLA_OPS, fla_gla
from attnbench.plugins.recurrent.gla import key_width, options_of
from attnbench.plugins.recurrent.gla_kernel import GLA_SPAN, gated_linear_attention, gla_init_state, pair_decay


def _split(t: torch.Tensor, n_head: int) -> torch.Tensor:
    B, T, _ = t.shape
    return t.view(B, T, n_head, -1).transpose(1, 2)  # (B, H, T, e)


class GatedLinearAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
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
        if self.kernel != "fla":  # ours: per chunk one matmul where its decay spans <= e^-GLA_SPAN
            path["intra_chunk_scores"] = f"factorised within e^-{GLA_SPAN:g}, else pairwise"
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


@torch.no_grad()
def attention_maps(mixer: GatedLinearAttention, x: torch.Tensor) -> torch.Tensor:
    """Implied weights w_ij = sum_d q_id k_jd prod_{j<s<=i} alpha_sd / sqrt(d_k), j <= i (signed): (B, H, T, T)."""
    q, k, _, g = mixer._heads(x)  # (B, H, T, d_k)
    decay = pair_decay(g.float())  # (B, H, d_k, T, T) prod_{j<s<=i} alpha_s, 0 for j > i
    return torch.einsum("bhid,bhjd,bhdij->bhij", q.float(), k.float(), decay) * mixer.d_k**-0.5  # (B, H, T, T)
