"""The recurrent mixers (retnet, gla, deltanet, gated_deltanet): each kernel against an outside
oracle (flash-linear-attention's pure-PyTorch references, fla.ops.<family>.naive) and against a
float64 token loop of the paper's recurrence; decoding from a prefix plus its state equals the
full-sequence forward; the fla kernel option is an error naming why off CUDA; the trust gate
passes each of them."""

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
from attnbench.plugins.recurrent.decays import FACTOR_SPAN
from attnbench.plugins.recurrent.delta_kernel import delta_rule
from attnbench.plugins.recurrent.gla_kernel import gated_linear_attention
from attnbench.plugins.recurrent.retnet_model import log_decay
from tests.helpers import Tolerance, assert_same_with_gradients, grad

VARIANTS = ("retnet", "gla", "deltanet", "gated_deltanet")
F64 = torch.float64
B, H, T, DK, DV = 2, 3, 37, 8, 6  # T is no multiple of any chunk size below


def _inputs(seed: int = 0, decay: float = 1.0):
    """q, k (unit-norm), v, beta, a scalar log decay g (B, H, T), a per-channel one gk, an initial state."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, DK, generator=gen, dtype=F64)  # (B, H, T, d_k)
    k = F.normalize(torch.randn(B, H, T, DK, generator=gen, dtype=F64), dim=-1)  # (B, H, T, d_k)
    v = torch.randn(B, H, T, DV, generator=gen, dtype=F64)  # (B, H, T, d_v)
    beta = torch.rand(B, H, T, generator=gen, dtype=F64)  # (B, H, T)
    g = -decay * torch.rand(B, H, T, generator=gen, dtype=F64)  # (B, H, T) <= 0
    gk = decay * F.logsigmoid(torch.randn(B, H, T, DK, generator=gen, dtype=F64))  # (B, H, T, d_k) <= 0
    s0 = torch.randn(B, H, DK, DV, generator=gen, dtype=F64)  # (B, H, d_k, d_v)
    return q, k, v, beta, g, gk, s0


def _loop(q, k, v, g, s0, beta=None, scale=DK**-0.5):
    """The papers' recurrences token by token in float64 (S (d_k, d_v), o_t = scale S_t^T q_t):
    gated linear attention S_t = diag(exp g_t) S_{t-1} + k_t v_t^T (g (B, H, T, d_k or 1)); with beta
    the gated delta rule S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T (g (B, H, T))."""
    s, out = s0.clone(), []
    for t in range(q.shape[2]):
        kt, vt = k[:, :, t], v[:, :, t]  # (B, H, d)
        if beta is None:
            s = torch.exp(g[:, :, t])[..., None] * s + kt[..., None] * vt[..., None, :]  # (B, H, d_k, d_v)
        else:
            s = torch.exp(g[:, :, t])[..., None, None] * s  # (B, H, d_k, d_v) a_t S
            b = beta[:, :, t, None]  # (B, H, 1)
            s = s + kt[..., None] * (b * (vt - (s * kt[..., None]).sum(-2)))[..., None, :]  # delta update
        out.append(scale * (q[:, :, t, :, None] * s).sum(-2))  # (B, H, d_v)
    return torch.stack(out, dim=2), s  # (B, H, T, d_v), (B, H, d_k, d_v)


def _retention_decay():
    return log_decay(H, dtype=F64)[None, :, None, None].expand(B, H, T, 1)  # (B, H, T, 1)


# -- the kernels against a float64 re-statement of each paper's recurrence --------------------


@pytest.mark.parametrize("chunk", [1, 5, 16, 64])
@pytest.mark.parametrize("family", ["retention", "gla", "deltanet", "gated_deltanet"])
def test_chunked_kernel_equals_the_float64_recurrence(family, chunk):
    q, k, v, beta, g, gk, s0 = _inputs(decay=30.0 if chunk == 16 else 1.0)  # strong decays too
    if family in ("retention", "gla"):
        gate = _retention_decay() if family == "retention" else gk  # (B, H, T, 1 or d_k)
        got, s = gated_linear_attention(q, k, v, gate, s0, chunk, DK**-0.5)
        ref, ref_s = _loop(q, k, v, gate, s0)
    else:
        decay = None if family == "deltanet" else g
        got, s = delta_rule(q, k, v, beta, decay, s0, chunk, DK**-0.5)
        ref, ref_s = _loop(q, k, v, torch.zeros_like(g) if decay is None else g, s0, beta)
    assert got.dtype == F64 and s.dtype == F64
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, ref_s, rtol=1e-10, atol=1e-10)


def test_gated_delta_rule_factorised_and_segment_sum_chunks_mixed_equal_the_recurrence_with_gradients():
    """D * (A B^T) is one matmul of A e^G and B e^-G for the rows whose decay since the chunk's
    start spans at most e^-FACTOR_SPAN and takes segment-sum decays for the others: one call with
    both kinds (and a gate that forgets everything) matches the float64 recurrence in values and
    gradients."""
    q, k, v, beta, g, _, s0 = _inputs(seed=5, decay=0.5)  # mild decays: chunks of 8 span about e^-2
    g[0, 1, 10] = -2.5 * FACTOR_SPAN  # one step of one chunk forgets: the rows after it leave the span
    g[1, 2, 33:] = -1e4  # the short last chunk forgets everything
    inputs = [t.requires_grad_() for t in (q, k, v, beta, g, s0)]
    got = delta_rule(q, k, v, beta, g, s0, 8, DK**-0.5)
    assert_same_with_gradients(got, _loop(q, k, v, g, s0, beta), inputs)


@pytest.mark.parametrize("chunk", [8, 64])
@pytest.mark.parametrize("family", ["deltanet", "gated_deltanet"])
def test_delta_rule_from_no_state_equals_the_recurrence_from_zero(family, chunk):
    """state None (training): the one-chunk WY form (no W, no state) when the chunk holds the
    sequence, the chunked scan otherwise; the recurrence from S_0 = 0, and the zero-state
    kernel's gradients."""
    q, k, v, beta, g, _, s0 = (t.requires_grad_() for t in _inputs(seed=3, decay=3.0))
    decay = None if family == "deltanet" else g
    got, none = delta_rule(q, k, v, beta, decay, None, chunk, DK**-0.5)
    ref, _ = _loop(q, k, v, torch.zeros_like(g) if decay is None else g, torch.zeros_like(s0), beta)
    assert none is None
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
    zero, _ = delta_rule(q, k, v, beta, decay, torch.zeros_like(s0), chunk, DK**-0.5)
    inputs = (q, k, v, beta) if decay is None else (q, k, v, beta, g)
    for a, b in zip(
        torch.autograd.grad(got.square().sum(), inputs), torch.autograd.grad(zero.square().sum(), inputs), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("family", ["gla", "gated_deltanet"])
def test_kernels_leave_the_callers_state_alone_and_split_anywhere(family):
    """Any split of the sequence, each piece from the last one's state, gives the whole."""
    q, k, v, beta, g, gk, s0 = _inputs(seed=1)
    before = s0.clone()
    run = (
        (lambda a, b, s: gated_linear_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], gk[:, :, a:b], s, 8, 0.3))
        if family == "gla"
        else (
            lambda a, b, s: delta_rule(
                q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], beta[:, :, a:b], g[:, :, a:b], s, 8, 0.3
            )
        )
    )
    whole, s_whole = run(0, T, s0)
    parts, s = [], s0
    for a, b in [(0, 1), (1, 12), (12, 13), (13, T)]:
        o, s = run(a, b, s)
        parts.append(o)
    torch.testing.assert_close(torch.cat(parts, dim=2), whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s, s_whole, rtol=1e-12, atol=1e-12)
    assert torch.equal(s0, before)


# -- the outside oracle: flash-linear-attention's reference functions -------------------------

fla_naive = pytest.mark.skipif(
    importlib.util.find_spec("fla") is None, reason="fla-core (the test extra) is not installed"
)
# fla's naive references cast their inputs to fp32 (.float()) whatever they are given, so our
# float64 kernels meet them at fp32 rounding; the float64 loop above is the tight check.
FLA_TOL = Tolerance(rtol=2e-5, atol=2e-5)


def _bthd(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)  # (B, H, T, ...) <-> (B, T, H, ...), fla's layout


@fla_naive
def test_retention_equals_fla_naive_retention():
    from fla.ops.retention.naive import naive_retention

    q, k, v, *_ = _inputs()
    got, _ = gated_linear_attention(q, k, v, _retention_decay(), torch.zeros(B, H, DK, DV, dtype=F64), 16, DK**-0.5)
    torch.testing.assert_close(got, naive_retention(q, k, v), **FLA_TOL)


@fla_naive
def test_gla_equals_fla_naive_recurrent_gla():
    from fla.ops.gla.naive import naive_recurrent_gla

    q, k, v, _, _, gk, s0 = _inputs(decay=5.0)
    got, s = gated_linear_attention(q, k, v, gk, s0, 16, DK**-0.5)
    ref, ref_s = naive_recurrent_gla(
        _bthd(q), _bthd(k), _bthd(v), _bthd(gk), initial_state=s0, output_final_state=True
    )  # scale 1 / sqrt(d_k) inside
    torch.testing.assert_close(got, _bthd(ref), **FLA_TOL)
    assert ref_s is not None  # output_final_state=True
    torch.testing.assert_close(s, ref_s.double(), **FLA_TOL)


@fla_naive
def test_deltanet_equals_fla_delta_rule_recurrence_and_chunkwise():
    from fla.ops.delta_rule.naive import delta_rule_chunkwise, delta_rule_recurrence

    q, k, v, beta, _, _, s0 = _inputs()
    got, s = delta_rule(q, k, v, beta, None, s0, 16, DK**-0.5)
    ref, ref_s = delta_rule_recurrence(q, k, v, beta, initial_state=s0.float(), output_final_state=True)
    torch.testing.assert_close(got, ref.double(), **FLA_TOL)
    assert ref_s is not None  # output_final_state=True
    torch.testing.assert_close(s, ref_s.double(), **FLA_TOL)
    # fla's chunkwise WY reference keeps float64 (no initial state, T a multiple of its chunk)
    n = 32
    got, s = delta_rule(q[:, :, :n], k[:, :, :n], v[:, :, :n], beta[:, :, :n], None, torch.zeros_like(s0), 16, DK**-0.5)
    ref, ref_s = delta_rule_chunkwise(q[:, :, :n], k[:, :, :n], v[:, :, :n], beta[:, :, :n], chunk_size=8)
    assert ref.dtype == F64
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, ref_s, rtol=1e-10, atol=1e-10)


@fla_naive
@pytest.mark.parametrize("decay", [1.0, 30.0])
def test_gated_deltanet_equals_fla_naive_recurrent_gated_delta_rule(decay):
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    q, k, v, beta, g, _, s0 = _inputs(decay=decay)
    got, s = delta_rule(q, k, v, beta, g, s0, 16, DK**-0.5)
    ref, ref_s = naive_recurrent_gated_delta_rule(
        _bthd(q), _bthd(k), _bthd(v), _bthd(beta), _bthd(g), initial_state=s0, output_final_state=True
    )
    torch.testing.assert_close(got, _bthd(ref).double(), **FLA_TOL)
    assert ref_s is not None  # output_final_state=True
    torch.testing.assert_close(s, ref_s.double(), **FLA_TOL)


# -- the mixers: decoding from a prefix plus its state equals the full forward -----------------


def _mixer(registry, name: str, **options):
    variant = registry.get(name)
    config = ModelConfig(
        vocab_size=64,
        d_model=24,
        n_layer=1,
        n_head=3,
        context=64,
        options=variant.make_options({"chunk_size": 8, **options}),
    )
    torch.manual_seed(0)
    return variant, config, variant.build_mixer(config, 0).double().eval()


@pytest.mark.parametrize("name", VARIANTS)
def test_decoding_from_a_prefix_and_its_state_equals_the_full_forward(name, registry):
    variant, config, mixer = _mixer(registry, name)
    x = torch.randn(2, 45, config.d_model, dtype=F64)  # (B, T, D)
    with torch.no_grad():
        full = mixer(x)  # (B, T, D)
        state = mixer.init_state(2, 64, dtype=F64)
        prefix, state = mixer.step(x[:, :19], state)  # a 19-token prefill, several chunks
        kept = [t.clone() for t in state_tensors(state)]
        rest, pos = [], 19
        for size in (1, 1, 7, 1, 16):  # then single tokens and short runs
            y, state = mixer.step(x[:, pos : pos + size], state)
            rest.append(y)
            pos += size
        again, _ = mixer.step(x[:, 19:20], _replay(mixer, x[:, :19]))  # the prefix's state, rebuilt
    assert pos == 45
    torch.testing.assert_close(prefix, full[:, :19], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(torch.cat(rest, dim=1), full[:, 19:], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(again, full[:, 19:20], rtol=1e-10, atol=1e-10)
    # the prefix's state was not modified by the steps that followed it
    replayed = state_tensors(_replay(mixer, x[:, :19]))
    assert all(torch.equal(a, b) for a, b in zip(kept, replayed, strict=True))
    assert sum(t[0].numel() for t in state_tensors(state)) == variant.state_size(config, 0, 45)


def _replay(mixer, prefix: torch.Tensor):
    with torch.no_grad():
        return mixer.step(prefix, mixer.init_state(prefix.shape[0], 64, dtype=prefix.dtype))[1]


@pytest.mark.parametrize("name", ["retnet", "gla"])
def test_attention_maps_are_the_implied_weights(name, registry):
    """o_i = sum_j w_ij v_j for the values fed to the kernel: the maps say what the mixer mixes."""
    _, config, mixer = _mixer(registry, name)
    x = torch.randn(1, 20, config.d_model, dtype=F64)  # (B, T, D)
    q, k, v, g = mixer._heads(x)  # (B, H, T, .)
    o, _ = gated_linear_attention(q, k, v, g, mixer.init_state(1, 20, dtype=F64), 8, q.shape[-1] ** -0.5)
    w = registry.get(name).attention_maps(mixer, x)  # (B, H, T, T)
    assert w.shape == (1, config.n_head, 20, 20) and torch.equal(w, w.tril())
    torch.testing.assert_close(w.double() @ v, o, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", VARIANTS)
def test_float32_mixer_agrees_with_float64(name, registry):
    _, config, mixer = _mixer(registry, name)
    x = torch.randn(2, 30, config.d_model, dtype=F64)  # (B, T, D)
    with torch.no_grad():
        ref = mixer(x)
        got = mixer.float()(x.float())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", VARIANTS)
def test_bf16_autocast_runs_the_kernels_in_fp32(name, registry):
    """Under autocast (CPU here, CUDA in use) the projections are bf16, the state stays fp32."""
    _, config, mixer = _mixer(registry, name)
    mixer = mixer.float()
    x = torch.randn(2, 30, config.d_model, requires_grad=True)  # (B, T, D)
    ref = mixer(x).detach()  # (B, T, D) fp32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mixer(x)  # (B, T, D)
        head, state = mixer.step(x[:, :11], mixer.init_state(2, 64, dtype=torch.float32))
        tail, state = mixer.step(x[:, 11:], state)
    y.float().sum().backward()
    assert all(t.dtype == torch.float32 for t in state_tensors(state))
    assert torch.isfinite(grad(x)).all()
    scale = ref.abs().max()
    # the gate's bf16 tolerance: the per-head RMS norm magnifies bf16 rounding of a head output
    # that nearly vanishes (seen: 5.6e-2 on gla here, 7.9e-2 on gated_deltanet at weights x16)
    assert (y.float() - ref).abs().max() / scale < 1e-1
    assert (torch.cat([head, tail], dim=1).float() - y.float()).abs().max() / scale < 5e-2


# -- the fla kernel option --------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_fla_kernel_off_cuda_is_an_error_naming_why(name, registry):
    _, config, mixer = _mixer(registry, name, kernel="fla")
    assert describe_path(mixer)["kernel"].startswith("fla.ops.")
    with pytest.raises(RuntimeError, match=f"{name} kernel 'fla' cannot run: the fla kernels run on CUDA only"):
        mixer(torch.randn(1, 9, config.d_model, dtype=F64))
    assert describe_path(_mixer(registry, name)[2])["kernel"].startswith("recurrent.")
    with pytest.raises(ValueError, match=r"kernel must be one of \['chunked', 'fla'\]"):
        registry.get(name).make_options({"kernel": "triton"})


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
def test_the_gate_passes_each_recurrent_mixer(name, registry):
    results = {r.check: r for r in run_checks(registry.get(name), long_T=512, time_limit_s=300)}
    bad = {c: r.detail for c, r in results.items() if r.status not in ("pass", "skip")}
    assert not bad, bad
    assert {c for c, r in results.items() if r.status == "skip"} == {"autocast_at_scale"}  # CUDA only
    figure = results["float64_at_scale"].figure
    assert figure is not None and math.isfinite(figure)
