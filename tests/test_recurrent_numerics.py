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
from attnbench.plugins.recurrent.decays import FACTOR_SPAN
from attnbench.plugins.recurrent.gla_kernel import gated_linear_attention
from tests.helpers import assert_same_with_gradients

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


def _gla_loop(q, k, v, g, s0, scale):
    """S_t = diag(exp g_t) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t, token by token."""
    s, out = s0, []
    for t in range(q.shape[2]):
        s = torch.exp(g[:, :, t])[..., None] * s + k[:, :, t, :, None] * v[:, :, t, None, :]  # (B, H, d_k, d_v)
        out.append(scale * (q[:, :, t, :, None] * s).sum(-2))  # (B, H, d_v)
    return torch.stack(out, dim=2), s


def test_gla_scores_factorised_and_pairwise_chunks_mixed_equal_the_recurrence_with_gradients():
    """Rows whose decay since the chunk's start spans more than e^-FACTOR_SPAN (a forget gate near
    0) take the pairwise exponents, the rest one matmul: in one call both, values and gradients as
    the recurrence's."""
    gen = torch.Generator().manual_seed(4)
    B, H, T, dk, dv, chunk = 2, 2, 29, 4, 3, 8
    q, k = (torch.randn(B, H, T, dk, generator=gen, dtype=F64) for _ in range(2))
    v, s0 = torch.randn(B, H, T, dv, generator=gen, dtype=F64), torch.randn(B, H, dk, dv, generator=gen, dtype=F64)
    g = F.logsigmoid(torch.randn(B, H, T, dk, generator=gen, dtype=F64))  # (B, H, T, d_k) mild decays
    g[0, 1, 9, 2] = -2.5 * FACTOR_SPAN  # one channel of one chunk forgets: the rows after it leave the span
    g[1, 0, 25:, :] = -1e4  # the short last chunk forgets everything
    inputs = [t.requires_grad_() for t in (q, k, v, g, s0)]
    got = gated_linear_attention(q, k, v, g, s0, chunk, dk**-0.5)
    assert_same_with_gradients(got, _gla_loop(q, k, v, g, s0, dk**-0.5), inputs)


@pytest.mark.parametrize("kernel", ["gla", "gated_delta", "ssd"])
def test_a_later_gate_in_the_chunk_leaves_every_earlier_output_unchanged_to_the_bit(kernel):
    """Where a chunk's decay leaves FACTOR_SPAN, the rows past that point take the segment-sum
    form: the choice is per row, from the row's own span. A gate that forgets at position 12 of a
    chunk of 16 then changes no output before 12, not even in the last bit (deciding per chunk,
    from the chunk's total, let a later key pick an earlier row's rounding: the fp16 gate saw it)."""
    from attnbench.plugins.recurrent.delta_kernel import delta_rule
    from attnbench.plugins.recurrent.ssd_kernel import ssd_scan

    gen = torch.Generator().manual_seed(7)
    B, H, T, d = 1, 2, 32, 4
    q, k, v = (torch.randn(B, H, T, d, generator=gen) for _ in range(3))
    decay = -0.1 * torch.rand(B, H, T, generator=gen)  # (B, H, T) mild: no chunk leaves the span
    forget = decay.clone()
    forget[:, :, 12] = -2.5 * FACTOR_SPAN  # a later key of the first chunk forgets

    def run(g: torch.Tensor) -> torch.Tensor:
        if kernel == "gla":
            out, _ = gated_linear_attention(q, k, v, g[..., None].expand(B, H, T, d), torch.zeros(B, H, d, d), 16, 0.5)
        elif kernel == "gated_delta":
            out, _ = delta_rule(q, F.normalize(k, dim=-1), v, torch.sigmoid(v[..., 0]), g, None, 16, 0.5)
        else:
            out, _ = ssd_scan(q, k, v, g, None, 16)
        return out  # (B, H, T, d)

    before, after = run(decay), run(forget)
    assert torch.equal(before[:, :, :12], after[:, :, :12])
    assert not torch.equal(before[:, :, 12:16], after[:, :, 12:16])  # the forgetting did act
