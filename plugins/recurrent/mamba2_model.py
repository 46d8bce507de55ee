"""The Mamba2 mixer (the equations and the registration are in ``mamba2``): the module, its
decode state, the fla path and the SSD attention maps."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import ModelConfig, mark_residual
from attnbench.plugins.kernels.short_conv import causal_depthwise_conv
from attnbench.plugins.recurrent.common import require_fla
from attnbench.plugins.recurrent.decays import segment_sums
from attnbench.plugins.recurrent.mamba2 import FLA_SSD_OP, dims, options_of
from attnbench.plugins.recurrent.ssd_kernel import ssd_init_state, ssd_scan


@dataclass(frozen=True)
class Mamba2State:
    conv: torch.Tensor  # (B, d_conv - 1, C_conv) the last inputs of the convolution, oldest first
    ssm: torch.Tensor  # (B, H, N_s, P) S, fp32 (float64 when asked)


class Mamba2(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        opts = options_of(config)
        self.inner, self.head_dim, self.conv_dim = dims(config)
        self.n_head, self.d_state, self.n_groups = config.n_head, opts.d_state, opts.n_groups
        self.d_conv, self.chunk_size, self.kernel = opts.d_conv, opts.chunk_size, opts.kernel
        self.in_proj = nn.Linear(config.d_model, self.inner + self.conv_dim + self.n_head, bias=config.bias)
        self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, opts.d_conv, groups=self.conv_dim)  # depthwise
        # dt = softplus(dt_bias) log-uniform in [dt_min, dt_max]; A = -exp(A_log) uniform in [1, 16].
        dt = torch.exp(torch.empty(self.n_head).uniform_(math.log(opts.dt_min), math.log(opts.dt_max)))  # (H,)
        dt = dt.clamp_min(1e-4)  # (H,)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # (H,) inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.empty(self.n_head).uniform_(1.0, 16.0)))  # (H,)
        self.D = nn.Parameter(torch.ones(self.n_head))  # (H,)
        self.norm_weight = nn.Parameter(torch.ones(self.inner))  # (inner,) the gated RMSNorm's gain
        self.out_proj = mark_residual(nn.Linear(self.inner, config.d_model, bias=config.bias))

    def extra_repr(self) -> str:
        return (
            f"n_head={self.n_head}, head_dim={self.head_dim}, d_state={self.d_state}, d_conv={self.d_conv}, "
            f"n_groups={self.n_groups}, chunk_size={self.chunk_size}, kernel={self.kernel}"
        )

    def describe_path(self) -> dict[str, object]:
        parallel = FLA_SSD_OP if self.kernel == "fla" else "recurrent.ssd_kernel.ssd_scan"
        return {"kernel": parallel, "decode_kernel": "recurrent.ssd_kernel.ssd_scan", "chunk_size": self.chunk_size}

    def _conv(self, xbc: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal depthwise convolution then SiLU; cache (B, d_conv-1, C) the inputs before xbc."""
        full = torch.cat([cache.to(xbc.dtype), xbc], dim=1)  # (B, d_conv-1+t, C)
        bias = self.conv.bias.to(xbc.dtype) if self.conv.bias is not None else None
        y = causal_depthwise_conv(full, self.conv.weight.to(xbc.dtype), bias)  # (B, t, C) contiguous
        new = full[:, full.shape[1] - (self.d_conv - 1) :].to(cache.dtype, copy=True)  # (B, d_conv-1, C) own storage
        return F.silu(y), new  # (B, t, C), (B, d_conv-1, C)

    def _in_proj(self, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """[z, xBC, dt] = W_in u as three products with row blocks of the one in_proj weight: the
        same numbers as one product split, and the backward sums three input gradients (D wide)
        instead of concatenating the outputs' gradients (inner + C_conv + H wide, a strided copy
        that took 11-14 ms per layer at T 8192 on one CPU thread)."""
        rows = (self.inner, self.conv_dim, self.n_head)
        biases = [None] * len(rows) if self.in_proj.bias is None else self.in_proj.bias.split(rows)
        return tuple(F.linear(u, w, b) for w, b in zip(self.in_proj.weight.split(rows), biases, strict=True))

    def _ssm_inputs(self, u: torch.Tensor, conv_cache: torch.Tensor):
        """u (B, t, D) -> z (B, t, inner), x (B, H, t, P), B and C per group (B, G, t, N_s), dt and
        log a (B, H, t) in fp32 (float64 when given), and the new convolution cache."""
        B_, t, _ = u.shape
        z, xbc, dt = self._in_proj(u)  # (B, t, inner), (B, t, C_conv), (B, t, H)
        xbc, conv_cache = self._conv(xbc, conv_cache)  # (B, t, C_conv)
        x, b, c = xbc.split([self.inner, self.n_groups * self.d_state, self.n_groups * self.d_state], dim=-1)
        # x once contiguous, time-major (B, t, H, P) in memory: a slice of the convolution's output (rows
        # conv_dim apart) made every per-head scale of the scan and the D skip 3-4x slower (T 8192, a CPU)
        x = x.contiguous().view(B_, t, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, t, P)
        b, c = (m.view(B_, t, self.n_groups, self.d_state).transpose(1, 2) for m in (b, c))  # (B, G, t, N_s) each
        fp = torch.float64 if u.dtype == torch.float64 else torch.float32
        with torch.autocast(u.device.type, enabled=False):  # the decay is exponentiated: fp32 at least
            dt = F.softplus(dt.to(fp) + self.dt_bias.to(fp)).transpose(1, 2)  # (B, H, t) > 0
            log_a = -torch.exp(self.A_log.to(fp))[:, None] * dt  # (B, H, t) dt A <= 0
        return z, x, b, c, dt, log_a, conv_cache

    def _out(self, y: torch.Tensor, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """y + D x, gated RMSNorm over each group's channels (as official Mamba2's RMSNormGated with
        group_size = inner / n_groups; fp32 inside), output projection."""
        y = torch.addcmul(y, self.D.to(y.dtype)[:, None, None], x)  # (B, H, t, P) y + D x, the skip
        y = y.transpose(1, 2).flatten(2)  # (B, t, inner)
        fp = torch.float64 if y.dtype == torch.float64 else torch.float32
        g = (y.to(fp) * F.silu(z.to(fp))).unflatten(-1, (self.n_groups, -1))  # (B, t, n_groups, inner / n_groups)
        g = F.rms_norm(g, (g.shape[-1],), eps=1e-5)  # (B, t, n_groups, .) unit RMS per group, torch's fused norm
        # W_out (g * w) = g W'^T with W' = W_out diag(w): the gain folded into the (D, inner) weight, not a
        # pass over the (B, t, inner) activations each way
        weight = self.out_proj.weight * self.norm_weight.to(self.out_proj.weight.dtype)  # (D, inner)
        return F.linear(g.flatten(2).to(z.dtype), weight, self.out_proj.bias)  # (B, t, D)

    def _mix(self, u: torch.Tensor, state: Mamba2State) -> tuple[torch.Tensor, Mamba2State]:
        z, x, b, c, dt, log_a, conv = self._ssm_inputs(u, state.conv)
        y, ssm = ssd_scan(c, b, x, log_a, state.ssm, self.chunk_size, dt)  # (B, H, t, P) fp32
        return self._out(y, x, z), Mamba2State(conv, ssm)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        if self.kernel == "fla":
            require_fla("mamba2", u)
        conv = torch.zeros(u.shape[0], self.d_conv - 1, self.conv_dim, device=u.device, dtype=u.dtype)
        z, x, b, c, dt, log_a, _ = self._ssm_inputs(u, conv)
        if self.kernel == "fla":
            c, b = self.per_head(c), self.per_head(b)  # (B, H, T, N_s)
            y = fla_ssd(c, b * dt[..., None], x, log_a)  # (B, H, T, P)
        else:
            y, _ = ssd_scan(c, b, x, log_a, None, self.chunk_size, dt)  # (B, H, T, P) from S_0 = 0
        return self._out(y, x, z)  # (B, T, D)

    def per_head(self, m: torch.Tensor) -> torch.Tensor:
        """B or C per group (B, G, t, N_s) -> per head (B, H, t, N_s), a copy."""
        return m.repeat_interleave(self.n_head // self.n_groups, dim=1)

    def init_state(self, batch_size: int, max_len: int, device=None, dtype=None) -> Mamba2State:
        """Zero convolution inputs and S: fp32 unless float64 is asked."""
        fp = torch.float64 if dtype == torch.float64 else torch.float32
        conv = torch.zeros(batch_size, self.d_conv - 1, self.conv_dim, device=device, dtype=fp)
        return Mamba2State(conv, ssd_init_state(batch_size, self.n_head, self.d_state, self.head_dim, device, dtype))

    def step(self, u: torch.Tensor, state: Mamba2State) -> tuple[torch.Tensor, Mamba2State]:
        return self._mix(u, state)


def fla_ssd(c, b, x, log_a) -> torch.Tensor:
    """The SSD scan through fla's simple GLA kernel (q = C, k = dt B, v = x, g = dt A), from S = 0."""
    from fla.ops.simple_gla import chunk_simple_gla

    q, k, v = (t.transpose(1, 2).contiguous().to(x.dtype) for t in (c, b, x))  # (B, T, H, .) fla's layout
    # fla's ops are wrapped in torch.compiler.disable, whose annotation hides their signature from the checker
    o, _ = chunk_simple_gla(q, k, v, g=log_a.transpose(1, 2).contiguous().float(), scale=1.0)  # pyright: ignore[reportCallIssue]  # (B, T, H, P)
    return o.transpose(1, 2)  # (B, H, T, P)


@torch.no_grad()
def attention_maps(mixer: Mamba2, x: torch.Tensor) -> torch.Tensor:
    """SSD's attention form (the paper's eq. 16): w_ij = (C_i . B_j) dt_j exp(sum_{j<l<=i} dt_l A)
    for j <= i, signed and unnormalised (the D x_i skip not included): (B, H, T, T)."""
    conv = torch.zeros(x.shape[0], mixer.d_conv - 1, mixer.conv_dim, device=x.device, dtype=x.dtype)
    _, _, b, c, dt, log_a, _ = mixer._ssm_inputs(x, conv)  # (B, G, T, N_s), (B, H, T)
    b, c = mixer.per_head(b), mixer.per_head(c)  # (B, H, T, N_s)
    scores = c.float() @ (b.float() * dt.float()[..., None]).transpose(-1, -2)  # (B, H, T, T)
    return scores * torch.exp(segment_sums(log_a.float()))  # (B, H, T, T) zero above the diagonal
