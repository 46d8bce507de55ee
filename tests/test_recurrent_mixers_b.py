"""Mamba2 (SSD), sliding-window softmax and Based: each core against an outside oracle
(flash-linear-attention's pure-PyTorch references: naive_recurrent_simple_gla for SSD,
naive_parallel_attn(window_size) for the window, naive_parallel_based for Taylor attention)
and against float64 token loops of the papers' equations; decoding from a prefix plus its
state equals the full forward; the fla kernel option is an error naming why off CUDA; the
trust gate passes each of them."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import ModelConfig
from attnbench.contract.variant import state_tensors
from attnbench.experiments.speed.points import describe_path
from attnbench.gate.checks import run_checks
from attnbench.kernels.chunked import linear_attention, linear_init_state
from attnbench.plugins.attention.linear_model import taylor_features
from attnbench.plugins.recurrent.decays import FACTOR_SPAN
from attnbench.plugins.recurrent.ssd_kernel import ssd_scan
from attnbench.plugins.recurrent.window_kernel import window_attention, window_init_cache
from tests.helpers import Tolerance, assert_same_with_gradients, grad

VARIANTS = ("mamba2", "swa", "based")
F64 = torch.float64
B, H, T, N, P = 2, 3, 37, 6, 5  # T is no multiple of any chunk size below

fla_naive = pytest.mark.skipif(
    importlib.util.find_spec("fla") is None, reason="fla-core (the test extra) is not installed"
)
# fla's naive_recurrent_simple_gla casts to fp32 whatever it is given: our float64 kernel meets
# it at fp32 rounding; its other references keep float64 and are met at 1e-10.
FLA_TOL = Tolerance(rtol=2e-5, atol=2e-5)
TIGHT = Tolerance(rtol=1e-10, atol=1e-10)


def _bthd(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)  # (B, H, T, ...) <-> (B, T, H, ...), fla's layout


def _ssd_inputs(seed: int = 0, decay: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    c, b = (torch.randn(B, H, T, N, generator=gen, dtype=F64) for _ in range(2))  # (B, H, T, N_s)
    x = torch.randn(B, H, T, P, generator=gen, dtype=F64)  # (B, H, T, P)
    log_a = -decay * torch.rand(B, H, T, generator=gen, dtype=F64)  # (B, H, T) <= 0
    s0 = torch.randn(B, H, N, P, generator=gen, dtype=F64)  # (B, H, N_s, P)
    return c, b, x, log_a, s0


def _ssd_loop(c, b, x, log_a, s0):
    """S_t = a_t S_{t-1} + b_t x_t^T, y_t = S_t^T c_t, token by token in float64."""
    s, out = s0.clone(), []
    for t in range(x.shape[2]):
        s = torch.exp(log_a[:, :, t])[..., None, None] * s + b[:, :, t, :, None] * x[:, :, t, None, :]
        out.append((c[:, :, t, :, None] * s).sum(-2))  # (B, H, P)
    return torch.stack(out, dim=2), s


# -- SSD: the chunked scan against the recurrence and fla's simple-GLA reference --------------


@pytest.mark.parametrize("chunk", [1, 5, 16, 64])
@pytest.mark.parametrize("decay", [1.0, 30.0])
def test_ssd_scan_equals_the_float64_recurrence(chunk, decay):
    c, b, x, log_a, s0 = _ssd_inputs(decay=decay)
    got, s = ssd_scan(c, b, x, log_a, s0, chunk)
    ref, ref_s = _ssd_loop(c, b, x, log_a, s0)
    assert got.dtype == F64 and s.dtype == F64
    torch.testing.assert_close(got, ref, **TIGHT)
    torch.testing.assert_close(s, ref_s, **TIGHT)


@pytest.mark.parametrize("chunk", [8, 64])
def test_ssd_scan_factorised_and_segment_sum_chunks_mixed_equal_the_recurrence_with_gradients(chunk):
    """Inside a chunk the decay factorises, exp(G_i) exp(-G_j), where it spans at most
    e^-FACTOR_SPAN, else segment sums: one call with both kinds (one step that forgets, a tail
    that forgets everything), B and C shared by groups of heads with dt, in the one-chunk and
    the chunked paths, matches the float64 recurrence in values, state and gradients."""
    gen = torch.Generator().manual_seed(6)
    heads, groups, length = 4, 2, 29
    c, b = (torch.randn(2, groups, length, 3, generator=gen, dtype=F64) for _ in range(2))  # (B, G, T, N_s)
    x = torch.randn(2, heads, length, 2, generator=gen, dtype=F64)  # (B, H, T, P)
    dt = torch.rand(2, heads, length, generator=gen, dtype=F64) + 0.1  # (B, H, T)
    log_a = -0.2 * torch.rand(2, heads, length, generator=gen, dtype=F64)  # (B, H, T) mild
    log_a[0, 1, 10] = -2.5 * FACTOR_SPAN  # one step of one head forgets: its chunk is wide
    log_a[1, 3, 25:] = -1e4  # the tail forgets everything
    s0 = torch.randn(2, heads, 3, 2, generator=gen, dtype=F64)
    inputs = [t.requires_grad_() for t in (c, b, x, dt, log_a, s0)]
    state = s0 if chunk < length else None  # the one-chunk path runs from no state
    got = ssd_scan(c, b, x, log_a, state, chunk, dt)  # (y, the state after T or None)
    per = heads // groups
    b_h = b.repeat_interleave(per, dim=1) * dt[..., None]  # (B, H, T, N_s) head h's dt_h B
    want = _ssd_loop(c.repeat_interleave(per, dim=1), b_h, x, log_a, s0 if state is not None else 0 * s0)
    assert_same_with_gradients(got, want, inputs)


@fla_naive
def test_ssd_scan_equals_fla_naive_simple_gla():
    from fla.ops.simple_gla.naive import naive_chunk_simple_gla, naive_recurrent_simple_gla

    c, b, x, log_a, s0 = _ssd_inputs(decay=3.0)
    got, s = ssd_scan(c, b, x, log_a, s0, 16)
    ref, ref_s = naive_recurrent_simple_gla(
        _bthd(c), _bthd(b), _bthd(x), _bthd(log_a), scale=1.0, initial_state=s0.float(), output_final_state=True
    )
    torch.testing.assert_close(got, _bthd(ref).double(), **FLA_TOL)
    assert ref_s is not None  # output_final_state=True
    torch.testing.assert_close(s, ref_s.double(), **FLA_TOL)
    ref2, _ = naive_chunk_simple_gla(_bthd(c), _bthd(b), _bthd(x), _bthd(log_a), chunk_size=8, scale=1.0)
    got2, _ = ssd_scan(c, b, x, log_a, torch.zeros_like(s0), 8)
    torch.testing.assert_close(got2, _bthd(ref2).double(), **FLA_TOL)


@pytest.mark.parametrize("chunk", [8, 64])
def test_ssd_scan_from_no_state_equals_the_recurrence_from_zero(chunk):
    """state None (training): one chunk's masked form when the chunk holds the sequence, the
    chunked scan otherwise; the recurrence from S_0 = 0, gradients those of the zero-state scan."""
    c, b, x, log_a, s0 = (t.requires_grad_() if t.is_floating_point() else t for t in _ssd_inputs(seed=2))
    got, none = ssd_scan(c, b, x, log_a, None, chunk)
    ref, _ = _ssd_loop(c, b, x, log_a, torch.zeros_like(s0))
    assert none is None
    torch.testing.assert_close(got, ref, **TIGHT)
    zero, _ = ssd_scan(c, b, x, log_a, torch.zeros_like(s0), chunk)
    inputs = (c, b, x, log_a)
    for g_got, g_zero in zip(
        torch.autograd.grad(got.square().sum(), inputs), torch.autograd.grad(zero.square().sum(), inputs), strict=True
    ):
        torch.testing.assert_close(g_got, g_zero, **TIGHT)


@pytest.mark.parametrize(
    ("groups", "chunk", "length", "with_state"),
    [(1, 64, 20, False), (2, 8, 20, False), (1, 8, 21, True), (4, 64, 20, True)],
)
def test_ssd_scan_with_group_shared_b_and_c_equals_the_per_head_scan(groups, chunk, length, with_state):
    """Mamba2's B and C per group and dt per head (scores C B^T once per group) give the per-head
    scan's output, final state and gradients, in every path: one chunk, chunked, with a state."""
    gen = torch.Generator().manual_seed(5)
    heads = 4
    c, b = (torch.randn(1, groups, length, 3, generator=gen, dtype=F64).requires_grad_() for _ in range(2))
    x = torch.randn(1, heads, length, 2, generator=gen, dtype=F64).requires_grad_()  # (B, H, T, P)
    dt = torch.rand(1, heads, length, generator=gen, dtype=F64).requires_grad_()  # (B, H, T) > 0
    log_a = -dt.detach() * 0.7  # (B, H, T)
    s0 = torch.randn(1, heads, 3, 2, generator=gen, dtype=F64) if with_state else None
    shared, s_shared = ssd_scan(c, b, x, log_a, s0, chunk, dt)
    per = heads // groups
    c_h, b_h = c.repeat_interleave(per, dim=1), b.repeat_interleave(per, dim=1)  # (B, H, T, N_s)
    ref, s_ref = ssd_scan(c_h, b_h * dt[..., None], x, log_a, s0, chunk)
    torch.testing.assert_close(shared, ref, **TIGHT)
    if with_state:
        torch.testing.assert_close(s_shared, s_ref, **TIGHT)
    inputs = (c, b, x, dt)
    for got, want in zip(
        torch.autograd.grad(shared.square().sum(), inputs), torch.autograd.grad(ref.square().sum(), inputs), strict=True
    ):
        torch.testing.assert_close(got, want, **TIGHT)


def test_ssd_scan_splits_anywhere_and_leaves_the_callers_state_alone():
    c, b, x, log_a, s0 = _ssd_inputs(seed=1)
    before = s0.clone()
    whole, s_whole = ssd_scan(c, b, x, log_a, s0, 8)
    parts, s = [], s0
    for lo, hi in [(0, 1), (1, 12), (12, 13), (13, T)]:
        y, s = ssd_scan(c[:, :, lo:hi], b[:, :, lo:hi], x[:, :, lo:hi], log_a[:, :, lo:hi], s, 8)
        parts.append(y)
    torch.testing.assert_close(torch.cat(parts, dim=2), whole, **TIGHT)
    torch.testing.assert_close(s, s_whole, **TIGHT)
    assert torch.equal(s0, before)


# -- the sliding window against fla's reference and a float64 loop -----------------------------


def _window_loop(q, k, v, w):
    """o_i = softmax over j in [i - w + 1, i] of q_i . k_j / sqrt(h), one query at a time."""
    out = []
    for i in range(q.shape[2]):
        lo = max(0, i - w + 1)
        p = ((k[:, :, lo : i + 1] @ q[:, :, i, :, None]).squeeze(-1) * q.shape[-1] ** -0.5).softmax(-1)  # (B, H, n)
        out.append((p[..., None] * v[:, :, lo : i + 1]).sum(-2))  # (B, H, h)
    return torch.stack(out, dim=2)


@pytest.mark.parametrize("window", [5, T, 64])
def test_window_attention_from_an_empty_cache_equals_the_loop(window):
    """From an empty cache: the blocked kernel while the window is shorter than the sequence,
    SDPA's causal attention once it is not (T <= w); the float64 loop either way, and the
    cache keeps the last w - 1 keys and values."""
    q, k, v = (torch.randn(B, H, T, P, generator=torch.Generator().manual_seed(i), dtype=F64) for i in range(3))
    got, cache = window_attention(q, k, v, window_init_cache(B, H, P, dtype=F64), window, 16)
    torch.testing.assert_close(got, _window_loop(q, k, v, window), **TIGHT)
    torch.testing.assert_close(cache.k, k[:, :, max(T - (window - 1), 0) :], **TIGHT)
    torch.testing.assert_close(cache.v, v[:, :, max(T - (window - 1), 0) :], **TIGHT)


@fla_naive
@pytest.mark.parametrize("window,block", [(1, 7), (5, 3), (8, 64), (16, 5), (64, 16)])
def test_window_attention_equals_fla_naive_parallel_attn_and_the_loop(window, block):
    from fla.ops.attn.naive import naive_parallel_attn

    _, _, v, _, _ = _ssd_inputs()
    q, k = (torch.randn_like(v) for _ in range(2))  # (B, H, T, h)
    got, cache = window_attention(q, k, v, window_init_cache(B, H, P, dtype=F64), window, block)
    ref, _ = naive_parallel_attn(_bthd(q), _bthd(k), _bthd(v), window_size=window)  # float64 kept
    torch.testing.assert_close(got, _bthd(ref), **TIGHT)
    torch.testing.assert_close(got, _window_loop(q, k, v, window), **TIGHT)
    assert cache.k.shape == (B, H, min(T, window - 1), P)  # O(w) state: the last w - 1 positions


# -- Based's Taylor part against fla's reference -----------------------------------------------


@fla_naive
def test_taylor_linear_attention_equals_fla_naive_parallel_based():
    from fla.ops.based.naive import naive_parallel_based

    gen = torch.Generator().manual_seed(2)
    qf, kf = (torch.randn(B, H, T, 16, generator=gen, dtype=F64) for _ in range(2))  # (B, H, T, f)
    v = torch.randn(B, H, T, P, generator=gen, dtype=F64)  # (B, H, T, h)
    state = linear_init_state(B, H, 1 + 16 + 256, P, dtype=F64)
    got, _ = linear_attention(taylor_features(qf), taylor_features(kf), v, state, 8, 1e-6)
    ref = naive_parallel_based(qf, kf, v, use_norm=True)  # scale 1 / sqrt(f), eps 1e-6, float64
    torch.testing.assert_close(got, ref, **TIGHT)


# -- the mixers -------------------------------------------------------------------------------


def _mixer(registry, name: str, **options):
    variant = registry.get(name)
    small = {"mamba2": {"d_state": 8}, "swa": {"window": 6}, "based": {"window": 6, "feature_dim": 4}}[name]
    config = ModelConfig(
        vocab_size=64,
        d_model=24,
        n_layer=1,
        n_head=3,
        context=64,
        options=variant.make_options({"chunk_size": 8, **small, **options}),
    )
    torch.manual_seed(0)
    return variant, config, variant.build_mixer(config, 0).double().eval()


def _mamba2_loop(m, u):
    """The Mamba2 block token by token in float64 from its parameters: the causal conv as an
    explicit sum over the last d_conv inputs, S_t = exp(dt A) S + dt B x^T, y = C.S + D x,
    out = W_out RMSNorm(y * silu(z))."""
    Bn, Tn, _ = u.shape
    z, xbc, dt = m.in_proj(u).split([m.inner, m.conv_dim, m.n_head], dim=-1)
    w = m.conv.weight[:, 0]  # (C, K)
    K = w.shape[1]
    padded = F.pad(xbc, (0, 0, K - 1, 0))  # (B, K-1+T, C)
    conv = torch.stack([(padded[:, t : t + K] * w.T).sum(1) + m.conv.bias for t in range(Tn)], dim=1)
    x, b, c = F.silu(conv).split([m.inner, m.d_state, m.d_state], dim=-1)  # one group
    x = x.view(Bn, Tn, m.n_head, m.head_dim)  # (B, T, H, P)
    dt = F.softplus(dt + m.dt_bias)  # (B, T, H)
    A = -torch.exp(m.A_log)  # (H,)
    s = torch.zeros(Bn, m.n_head, m.d_state, m.head_dim, dtype=u.dtype)
    ys = []
    for t in range(Tn):
        s = (
            torch.exp(dt[:, t] * A)[..., None, None] * s
            + dt[:, t, :, None, None] * b[:, t, None, :, None] * x[:, t, :, None, :]
        )
        ys.append((c[:, t, None, :, None] * s).sum(-2) + m.D[:, None] * x[:, t])  # (B, H, P)
    y = torch.stack(ys, dim=1).flatten(2) * F.silu(z)  # (B, T, inner)
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5) * m.norm_weight
    return m.out_proj(y)


def test_mamba2_mixer_equals_a_float64_loop_of_the_block(registry):
    _, config, mixer = _mixer(registry, "mamba2")
    with torch.no_grad():  # the trained magnitudes, not only the init: larger dt and B, C
        mixer.in_proj.weight.mul_(8.0)
        x = torch.randn(2, 29, config.d_model, dtype=F64)  # (B, T, D)
        torch.testing.assert_close(mixer(x), _mamba2_loop(mixer, x), **TIGHT)


@fla_naive
def test_swa_and_based_mixers_equal_fla_references(registry):
    from fla.ops.attn.naive import naive_parallel_attn
    from fla.ops.based.naive import naive_parallel_based

    x = torch.randn(2, 29, 24, dtype=F64)  # (B, T, D)
    _, _, swa = _mixer(registry, "swa")
    q, k, v = swa._heads(x)  # (B, H, T, h)
    ref, _ = naive_parallel_attn(_bthd(q), _bthd(k), _bthd(v), window_size=6)
    with torch.no_grad():
        torch.testing.assert_close(swa(x), swa.c_proj(ref.flatten(2)), **TIGHT)  # ref (B, T, H, h)
        _, _, based = _mixer(registry, "based")
        qf, kf, q, k, v = based._heads(x)
        win, _ = naive_parallel_attn(_bthd(q), _bthd(k), _bthd(v), window_size=6)  # (B, T, H, h)
        lin = _bthd(naive_parallel_based(qf, kf, v, use_norm=True))  # (B, T, H, h)
        torch.testing.assert_close(based(x), based.c_proj((0.5 * (lin + win)).flatten(2)), **TIGHT)


def _replay(mixer, prefix: torch.Tensor):
    with torch.no_grad():
        return mixer.step(prefix, mixer.init_state(prefix.shape[0], 64, dtype=prefix.dtype))[1]


@pytest.mark.parametrize("name", VARIANTS)
def test_decoding_from_a_prefix_and_its_state_equals_the_full_forward(name, registry):
    variant, config, mixer = _mixer(registry, name)
    x = torch.randn(2, 45, config.d_model, dtype=F64)  # (B, T, D)
    with torch.no_grad():
        full = mixer(x)  # (B, T, D)
        prefix, state = mixer.step(x[:, :19], mixer.init_state(2, 64, dtype=F64))  # a 19-token prefill
        kept = [t.clone() for t in state_tensors(state)]
        rest, pos = [], 19
        for size in (1, 1, 7, 1, 16):  # then single tokens and short runs
            y, state = mixer.step(x[:, pos : pos + size], state)
            rest.append(y)
            pos += size
        again, _ = mixer.step(x[:, 19:20], _replay(mixer, x[:, :19]))  # the prefix's state, rebuilt
    assert pos == 45
    torch.testing.assert_close(prefix, full[:, :19], **TIGHT)
    torch.testing.assert_close(torch.cat(rest, dim=1), full[:, 19:], **TIGHT)
    torch.testing.assert_close(again, full[:, 19:20], **TIGHT)
    assert all(torch.equal(a, b) for a, b in zip(kept, state_tensors(_replay(mixer, x[:, :19])), strict=True))
    for T_ in (3, 45):  # below and past the window: the state holds what state_size declares
        held = sum(t[0].numel() for t in state_tensors(_replay(mixer, x[:, :T_])))
        assert held == variant.state_size(config, 0, T_)


def test_window_states_stop_growing_at_the_window(registry):
    for name in ("swa", "based"):
        variant, config, _ = _mixer(registry, name)
        assert variant.state_size(config, 0, 5) == variant.state_size(config, 0, 10_000)  # window 6: 5 kept
        assert variant.state_size(config, 0, 4) < variant.state_size(config, 0, 5)
    variant, config, _ = _mixer(registry, "mamba2")
    assert variant.state_size(config, 0, 1) == variant.state_size(config, 0, 10_000)


@pytest.mark.parametrize("name", VARIANTS)
def test_attention_maps_are_the_weights_the_mixer_applies(name, registry):
    _, config, mixer = _mixer(registry, name)
    x = torch.randn(1, 20, config.d_model, dtype=F64)  # (B, T, D)
    w = registry.get(name).attention_maps(mixer, x).double()  # (B, H, T, T)
    assert w.shape == (1, config.n_head, 20, 20) and torch.equal(w, w.tril())
    if name == "mamba2":  # the SSD matrix: y = W x before the D skip
        conv = torch.zeros(1, mixer.d_conv - 1, mixer.conv_dim, dtype=F64)
        _, xs, b, c, dt, log_a, _ = mixer._ssm_inputs(x, conv)
        b, c = mixer.per_head(b), mixer.per_head(c)  # (B, H, T, N_s)
        o, _ = ssd_scan(c, b * dt[..., None], xs, log_a, torch.zeros(1, 3, mixer.d_state, mixer.head_dim, dtype=F64), 8)
        torch.testing.assert_close(w @ xs, o, rtol=1e-5, atol=1e-5)
        return
    v = mixer._heads(x)[-1]  # (B, H, T, h) the values both parts share
    torch.testing.assert_close(w.sum(-1), torch.ones(1, config.n_head, 20, dtype=F64), rtol=1e-5, atol=1e-5)
    y = mixer.c_proj((w @ v).transpose(1, 2).flatten(2))  # (B, T, D)
    with torch.no_grad():
        torch.testing.assert_close(y, mixer(x), rtol=1e-5, atol=1e-5)
    if name == "swa":  # zero outside the band of 6
        assert torch.equal(w[..., 10, :5], torch.zeros_like(w[..., 10, :5]))


@pytest.mark.parametrize("name", VARIANTS)
def test_float32_and_bf16_autocast_agree_with_float64(name, registry):
    _, config, mixer = _mixer(registry, name)
    x = torch.randn(2, 30, config.d_model, dtype=F64)  # (B, T, D)
    with torch.no_grad():
        ref = mixer(x)
        mixer = mixer.float()
        got = mixer(x.float())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)
    xf = x.float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mixer(xf)  # (B, T, D)
        _, state = mixer.step(xf[:, :11], mixer.init_state(2, 64, dtype=torch.float32))
    y.float().sum().backward()
    assert torch.isfinite(grad(xf)).all()
    assert (y.double() - ref).abs().max() / ref.abs().max() < 5e-2  # the gate's bf16 tolerance is 1e-1
    kinds = {t.dtype for t in state_tensors(state)}
    assert torch.float32 in kinds and torch.float64 not in kinds


# -- options and the fla kernel ---------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_fla_kernel_off_cuda_is_an_error_naming_why(name, registry):
    _, config, mixer = _mixer(registry, name, kernel="fla")
    assert describe_path(mixer)["kernel"].startswith("fla.ops.")
    with pytest.raises(RuntimeError, match=f"{name} kernel 'fla' cannot run: the fla kernels run on CUDA only"):
        mixer(torch.randn(1, 9, config.d_model, dtype=F64))
    assert "fla" not in describe_path(_mixer(registry, name)[2])["kernel"]
    with pytest.raises(ValueError, match=r"kernel must be one of \['chunked', 'fla'\]"):
        registry.get(name).make_options({"kernel": "triton"})


def test_bad_options_name_what_is_wrong(registry):
    with pytest.raises(ValueError, match="window must be an integer >= 1, got 0"):
        registry.get("swa").make_options({"window": 0})
    with pytest.raises(ValueError, match="feature_dim must be an integer >= 1"):
        registry.get("based").make_options({"feature_dim": 2.5})
    with pytest.raises(ValueError, match="need 0 < dt_min <= dt_max"):
        registry.get("mamba2").make_options({"dt_min": 0.5, "dt_max": 0.1})
    variant = registry.get("mamba2")
    config = ModelConfig(
        vocab_size=64, d_model=24, n_layer=1, n_head=3, context=64, options=variant.make_options({"n_groups": 2})
    )
    with pytest.raises(ValueError, match=r"n_groups \(2\) to divide n_head"):
        variant.build_mixer(config, 0)


@pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("fla") is None,
    reason="the fla kernels need a CUDA device and fla installed",
)
@pytest.mark.parametrize("name", VARIANTS)
def test_fla_kernel_equals_ours_on_cuda(name, registry):
    variant = registry.get(name)
    config = ModelConfig(
        vocab_size=64, d_model=64, n_layer=1, n_head=2, context=128, options=variant.make_options(None)
    )
    ours = variant.build_mixer(config, 0).cuda()
    fla = variant.build_mixer(config.replace(options=variant.make_options({"kernel": "fla"})), 0).cuda()
    fla.load_state_dict(ours.state_dict())
    x = torch.randn(2, 128, 64, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(fla(x), ours(x), rtol=2e-3, atol=2e-3)


# -- the trust gate ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_the_gate_passes_each_mixer(name, registry):
    results = {r.check: r for r in run_checks(registry.get(name), long_T=512, time_limit_s=300)}
    bad = {c: r.detail for c, r in results.items() if r.status not in ("pass", "skip")}
    assert not bad, bad
    assert {c for c, r in results.items() if r.status == "skip"} == {"autocast_at_scale"}  # CUDA only
    figure = results["float64_at_scale"].figure
    assert figure is not None and math.isfinite(figure)
