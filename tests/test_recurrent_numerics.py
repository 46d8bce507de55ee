"""Issue 44's recurrent numerics, through the plugin API: Mamba2 with several groups equals a
per-group float64 restatement of the block (official Mamba2 normalises each group's channels
on its own), and the decaying mixers in fp32 stay within 1e-4 of float64 at inputs x100,
where a chunk's cumulative log decay reaches 10^4 (decays are segment sums, never
differences of running sums)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbench import ModelConfig

F64 = torch.float64


def _build(registry, name: str, d_model: int, n_head: int, **options):
    variant = registry.get(name)
    config = ModelConfig(
        vocab_size=64, d_model=d_model, n_layer=1, n_head=n_head, context=512, options=variant.make_options(options)
    )
    torch.manual_seed(0)
    return variant.build_mixer(config, 0)


def _mamba2_groups_loop(m, u):
    """Mamba2 token by token in float64, group by group: head h reads B and C of group
    h // (H / G); out = W_out(RMSNorm_g(y * silu(z)) * w), the mean square over each group's
    inner / G channels (official Mamba2's RMSNormGated, group_size = inner / n_groups)."""
    Bn, Tn, _ = u.shape
    G, H, N = m.n_groups, m.n_head, m.d_state
    z, xbc, dt = m.in_proj(u).split([m.inner, m.conv_dim, H], dim=-1)
    w = m.conv.weight[:, 0]  # (C, K)
    K = w.shape[1]
    padded = F.pad(xbc, (0, 0, K - 1, 0))  # (B, K-1+T, C)
    conv = torch.stack([(padded[:, t : t + K] * w.T).sum(1) + m.conv.bias for t in range(Tn)], dim=1)
    x, b, c = F.silu(conv).split([m.inner, G * N, G * N], dim=-1)
    x = x.view(Bn, Tn, H, m.head_dim)  # (B, T, H, P)
    b, c = b.view(Bn, Tn, G, N), c.view(Bn, Tn, G, N)  # (B, T, G, N_s)
    dt = F.softplus(dt + m.dt_bias)  # (B, T, H)
    A = -torch.exp(m.A_log)  # (H,)
    ys = []
    for h in range(H):
        grp = h // (H // G)
        s = torch.zeros(Bn, N, m.head_dim, dtype=u.dtype)  # (B, N_s, P)
        out = []
        for t in range(Tn):
            s = (
                torch.exp(dt[:, t, h] * A[h])[:, None, None] * s
                + (dt[:, t, h, None] * b[:, t, grp])[:, :, None] * x[:, t, h, None, :]
            )
            out.append((c[:, t, grp, :, None] * s).sum(1) + m.D[h] * x[:, t, h])  # (B, P)
        ys.append(torch.stack(out, dim=1))  # (B, T, P)
    y = torch.stack(ys, dim=2).flatten(2) * F.silu(z)  # (B, T, inner), heads in order
    groups = y.split(m.inner // G, dim=-1)  # G x (B, T, inner / G)
    normed = [yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + 1e-5) for yg in groups]  # each its own RMS
    return m.out_proj(torch.cat(normed, dim=-1) * m.norm_weight)  # (B, T, D)


@pytest.mark.parametrize("n_groups", [1, 2, 4])
def test_mamba2_groups_each_normalise_their_own_channels(registry, n_groups):
    mixer = _build(registry, "mamba2", 32, 4, d_state=4, n_groups=n_groups, chunk_size=8).double().eval()
    with torch.no_grad():
        x = torch.randn(2, 19, 32, dtype=F64)  # (B, T, D)
        torch.testing.assert_close(mixer(x), _mamba2_groups_loop(mixer, x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk", [64, 256])
@pytest.mark.parametrize("name", ["gated_deltanet", "gla"])
def test_fp32_decaying_mixers_agree_with_float64_at_inputs_x100(registry, name, chunk):
    m32 = _build(registry, name, 32, 2, chunk_size=chunk).eval()
    m64 = _build(registry, name, 32, 2, chunk_size=chunk).double().eval()
    m64.load_state_dict(m32.state_dict())
    x = 100.0 * torch.randn(1, 300, 32, generator=torch.Generator().manual_seed(1), dtype=F64)  # (B, T, D)
    with torch.no_grad():
        y64 = m64(x)  # (B, T, D)
        rel = float((m32(x.float()).double() - y64).abs().max() / y64.abs().max())
    assert rel < 1e-4, f"{name} chunk {chunk}: fp32 is {rel:.2e} off float64 at inputs x100"
