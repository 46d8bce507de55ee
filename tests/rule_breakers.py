"""Variants that each break one rule of the mixer contract in a way the trust gate used to
report only by its symptom; the gate must name the rule. Load through an entry point (see
tests/test_catalogue_gate.py) or in-process:

    get_plugin_manager(extra_plugins=[("rules", rule_breakers)], entry_points=False)

variant             rule broken                                   the gate says
mutates_state       step must not modify the state it was given   "step modified the state it was given"
state_on_module     decoding state lives in the state object      "step's result depends on more than the state"
overflows_at_scale  outputs stay finite at trained magnitudes     "non-finite output at weights x16"
                    (exp without max-subtraction, 1/h scaling:
                    finite at init with inputs x10)
float32_inside      mixers accept float64 (q.float() @ k)         "mixers must accept float64 (a .float() cast at ...?)"
returns_float32     mixers accept float64 (y.float() at the end)  "mixers must accept float64 (a .float() cast at ...?)"
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, mark_residual


@dataclass(frozen=True)
class SumState:
    total: torch.Tensor  # (B, D) sum of the values so far
    count: torch.Tensor  # (B,) tokens so far


class RunningMean(nn.Module):
    """Causal running mean:  y_t = W_o (1/(t+1)) sum_{j<=t} W_v x_j, exact in both forms.

    Broken: ``step`` adds to the given state's tensors in place (``add_``) and returns the
    same object, so stepping twice from one saved state counts the first step twice.
    """

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.v = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.o = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.arange(1, x.size(1) + 1, device=x.device, dtype=x.dtype)[:, None]  # (T, 1)
        return self.o(torch.cumsum(self.v(x), dim=1) / n)  # (B, T, D)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> SumState:
        d = self.v.out_features
        return SumState(
            torch.zeros(batch_size, d, device=device, dtype=dtype), torch.zeros(batch_size, device=device, dtype=dtype)
        )

    def step(self, x: torch.Tensor, state: SumState) -> tuple[torch.Tensor, SumState]:
        t = x.size(1)
        sums = state.total[:, None] + torch.cumsum(self.v(x), dim=1)  # (B, t, D)
        n = state.count[:, None] + torch.arange(1, t + 1, device=x.device, dtype=x.dtype)  # (B, t)
        state.total.copy_(sums[:, -1])  # the bug: writes into the caller's state
        state.count.add_(t)
        return self.o(sums / n[..., None]), state  # (B, t, D)


class CountsOnModule(RunningMean):
    """Broken: ``step`` keeps the token count on the module (reset by ``init_state``), not in
    the state it returns, so a second step from a saved state sees the first step's count."""

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> SumState:
        self.seen = 0  # the bug: decoding state on the module
        return super().init_state(batch_size, max_len, device, dtype)

    def step(self, x: torch.Tensor, state: SumState) -> tuple[torch.Tensor, SumState]:
        t = x.size(1)
        sums = state.total[:, None] + torch.cumsum(self.v(x), dim=1)  # (B, t, D)
        n = self.seen + torch.arange(1, t + 1, device=x.device, dtype=x.dtype)  # (t,)
        self.seen += t
        return self.o(sums / n[:, None]), SumState(sums[:, -1], state.count + t)  # (B, t, D)


class MupSoftmax(nn.Module):
    """Softmax attention with muP's 1/h logit scale:  y = softmax(Q K^T / h) V W_o.

    Broken: the softmax is exp(s) / sum exp(s) without subtracting the row max. With 1/h the
    logits stay below exp's fp32 range at init even for inputs x10 (about 65 at T=2048), so
    finite_long_inputs passes; at weights x16 they reach the hundreds and exp overflows.
    """

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = mark_residual(nn.Linear(config.d_model, config.d_model, bias=config.bias))

    def heads(self, z: torch.Tensor) -> torch.Tensor:
        B, T, D = z.shape
        return z.view(B, T, self.n_head, D // self.n_head).transpose(1, 2)  # (B, H, T, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, T, h)
        s = self.scores(q, k)  # (B, H, T, T)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        e = torch.exp(s).masked_fill(~keep, 0.0)  # (B, H, T, T) no max-subtraction: overflows for s > 88
        y = (e / e.sum(dim=-1, keepdim=True)) @ v  # (B, H, T, h)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-1, -2) / q.size(-1)  # (B, H, T, T) muP: 1/h, not 1/sqrt(h)


class Float32Inside(MupSoftmax):
    """Broken: the logits are taken as ``q.float() @ k``: correct in fp32, but a float64
    input meets a float32 operand and the matmul raises."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, T, h)
        s = q.float() @ k.transpose(-1, -2) / q.size(-1) ** 0.5  # (B, H, T, T) float32 q: the bug
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        p = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)  # (B, H, T, T)
        return self.c_proj((p.to(v.dtype) @ v).transpose(1, 2).reshape(B, T, D))  # (B, T, D)


class ReturnsFloat32(MupSoftmax):
    """Broken: softmax attention done right, then the output is cast with ``.float()``, so a
    float64 input comes back as float32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = map(self.heads, self.c_attn(x).split(D, dim=2))  # 3 x (B, H, T, h)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, h)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D)).float()  # (B, T, D) the bug: .float()


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="mutates_state",
            build_mixer=RunningMean,
            decode="recurrent",
            description="broken: step mutates the state it was given",
        )
    )
    register(
        Variant(
            name="state_on_module",
            build_mixer=CountsOnModule,
            decode="recurrent",
            description="broken: step keeps its token count on the module",
        )
    )
    register(
        Variant(
            name="overflows_at_scale",
            build_mixer=MupSoftmax,
            description="broken: exp without max-subtraction (finite at init only)",
        )
    )
    register(Variant(name="float32_inside", build_mixer=Float32Inside, description="broken: q.float() in the logits"))
    register(
        Variant(name="returns_float32", build_mixer=ReturnsFloat32, description="broken: output cast with .float()")
    )
