"""`toy-ema`: a causal exponential-moving-average token mixer, as a third-party plugin.

    s_t = a * s_{t-1} + (1 - a) * (W_v x_t),   y_t = W_o s_t,   a = sigmoid(theta) per channel

The parallel form uses the closed-form weights a^(t-j) (1-a) over j <= t, computed in
chunks of 64 so it never builds a (T, T) matrix per channel for long T.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbench import ModelConfig, Variant, hookimpl, mark_residual


@dataclass(frozen=True)
class EMAOptions:
    init_decay: float = 0.9  # initial a

    def __post_init__(self) -> None:
        if not 0.0 < self.init_decay < 1.0:
            raise ValueError(f"init_decay must be in (0, 1), got {self.init_decay}")


class EMAMixer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = config.options or EMAOptions()
        d = config.d_model
        self.v = nn.Linear(d, d, bias=config.bias)
        self.o = mark_residual(nn.Linear(d, d, bias=config.bias))
        logit = torch.log(torch.tensor(opts.init_decay) / (1 - opts.init_decay))
        self.theta = nn.Parameter(torch.full((d,), float(logit)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(self.theta)  # (D,)
        u = (1 - a) * self.v(x)  # (B, T, D)
        B, T, D = u.shape
        s = torch.zeros(B, D, dtype=u.dtype, device=u.device)  # carried state
        out = []
        for c0 in range(0, T, 64):
            uc = u[:, c0 : c0 + 64]  # (B, c, D)
            c = uc.size(1)
            i = torch.arange(c, device=u.device)
            expo = (i[:, None] - i[None, :]).clamp(min=0).to(u.dtype)  # (c, c)
            w = a[None, None, :] ** expo[:, :, None] * (i[:, None] >= i[None, :])[:, :, None]  # (c, c, D)
            local = torch.einsum("tjd,bjd->btd", w, uc)  # (B, c, D)
            carry = a[None, None, :] ** (i[None, :, None] + 1).to(u.dtype) * s[:, None, :]  # (B, c, D)
            yc = local + carry  # (B, c, D)
            s = yc[:, -1]
            out.append(yc)
        return self.o(torch.cat(out, dim=1))  # (B, T, D)

    def init_state(self, batch_size, max_len, device=None, dtype=None) -> torch.Tensor:
        return torch.zeros(batch_size, self.theta.numel(), device=device, dtype=dtype)  # (B, D)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.sigmoid(self.theta)  # (D,)
        u = (1 - a) * self.v(x)  # (B, t, D)
        ys = []
        for t in range(u.size(1)):
            state = a * state + u[:, t]  # (B, D) new tensor: the caller's state is untouched
            ys.append(state)
        return self.o(torch.stack(ys, dim=1)), state


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="toy-ema",
            build_mixer=EMAMixer,
            description="Causal exponential moving average (third-party test plugin)",
            options=EMAOptions,
            decode="recurrent",
            state_size=lambda config, layer, T: config.d_model,
            flops_per_token=lambda config, layer, T: 4.0 * config.d_model**2 + 4.0 * config.d_model,
            version="0.3.0",
        )
    )
