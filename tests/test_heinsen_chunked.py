"""The small-T training paths of issue 56 against the kernels they stand in for, values and
gradients: Heinsen's one-chunk path (``heinsen_model.log_attention_one_chunk``) against
``kernels.chunked.log_attention`` from the empty state, and future attention's dense path
against its lean kernels. Float64 equal to round-off, fp32 within fp32 round-off, at normal
and trained magnitudes (inputs x10, x100) and at lengths that are not a multiple of the chunk
(or equal to it)."""

from __future__ import annotations

import pytest
import torch

from attnbench import ModelConfig
from attnbench.kernels import chunked
from attnbench.plugins.attention import heinsen_model
from attnbench.plugins.attention.future_model import DENSE_KERNEL, LEAN_KERNEL, FutureAttention
from attnbench.plugins.attention.heinsen_model import LogAttention, log_attention_one_chunk
from attnbench.registry.loader import load_registry

CHUNK = 64  # heinsen's default chunk_size: quick's T = 24 and 64 are one chunk


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def chunked_kernel(q, k, log_v, chunk: int = CHUNK) -> torch.Tensor:
    B, H, _, h = q.shape
    return chunked.log_attention(q, k, log_v, chunked.log_init_state(B, H, h, log_v.shape[-1], dtype=q.dtype), chunk)[0]


def draw(shape, scale: float, dtype, seed: int = 0, extreme: bool = False) -> list[torch.Tensor]:
    """q, k ~ N(0, scale^2), log V ~ N(0, (3 scale)^2), (B, H, T, h); ``extreme``: an early
    token with keys -150 and log V 200 (value levels above 0, key levels grown)."""
    g = torch.Generator().manual_seed(seed)
    q, k, log_v = (s * torch.randn(shape, generator=g, dtype=torch.float64) for s in (scale, scale, 3 * scale))
    if extreme and shape[2] > 3:
        k[:, :, 3], log_v[:, :, 3] = -150.0, 200.0
    return [t.to(dtype).requires_grad_() for t in (q, k, log_v)]


def values_and_grads(fn, inputs, w):
    o = fn(*inputs)
    (g_q, g_k, g_v) = torch.autograd.grad((o * w).sum(), inputs)
    return [t.detach().double() for t in (o, g_q, g_k, g_v)]


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| over max(max |want|, 1): the outputs' weights are of order 1, so a
    gradient that is 0 in exact arithmetic (dq at T = 1) is compared to 1, not to its noise."""
    return float((got - want).abs().max() / want.abs().max().clamp_min(1.0))


def test_the_stabilisers_are_the_chunked_kernels():
    """The one-chunk path copies the kernel's constants (plugins import no private module)."""
    assert (heinsen_model.LEVEL, heinsen_model.LEVEL_K, heinsen_model.HEADROOM) == (
        chunked.LEVEL,
        chunked.LEVEL_K,
        chunked.HEADROOM,
    )
    assert heinsen_model.CUT == chunked.CUT


@pytest.mark.parametrize("shape", [(2, 2, 1, 16), (2, 2, 5, 16), (2, 2, 37, 16), (4, 1, 24, 64), (3, 2, 64, 32)])
@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0])
@pytest.mark.parametrize("extreme", [False, True])
def test_one_chunk_equals_the_chunked_kernel(shape, scale, extreme):
    """Float64: values and gradients equal to round-off (1e-12 of the largest). fp32: values
    and gradients within 1e-5 of the largest (same arithmetic; the backward is written out).
    Inputs x100 stay finite."""
    w64 = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        inputs = draw(shape, scale, dtype, extreme=extreme)
        got = values_and_grads(log_attention_one_chunk, inputs, w64.to(dtype))
        want = values_and_grads(chunked_kernel, inputs, w64.to(dtype))
        for name, a, b in zip(["o", "dq", "dk", "dlogV"], got, want, strict=True):
            assert torch.isfinite(a).all(), (dtype, name)
            assert rel(a, b) <= tol, (dtype, name, rel(a, b))


@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_one_chunk_fp32_as_accurate_as_the_kernel(scale):
    """Against Heinsen's equation term by term in float64: the fp32 one-chunk path errs no
    more than the fp32 chunked kernel (they agree to round-off, above)."""
    q, k, log_v = (t.detach() for t in draw((2, 2, 48, 16), scale, torch.float32, seed=3))
    q64, k64, v64 = q.double(), k.double(), log_v.double()
    s = torch.logsumexp(q64[:, :, :, None, :] + k64[:, :, None, :, :], dim=-1)  # (B, H, T, T)
    s = s.masked_fill(torch.ones(48, 48, dtype=torch.bool).triu(1), float("-inf"))  # j <= i
    ref = torch.logsumexp(s[..., None] + v64[:, :, None], dim=3) - torch.logsumexp(s, dim=-1, keepdim=True)
    err_new = rel(log_attention_one_chunk(q, k, log_v).double(), ref)
    err_old = rel(chunked_kernel(q, k, log_v).double(), ref)
    assert err_new <= max(2 * err_old, 1e-6), (err_new, err_old)


def test_one_chunk_is_causal_and_finite_at_100x():
    """A later change moves no earlier output, inputs x100, early extreme token included."""
    q, k, log_v = (t.detach() for t in draw((2, 2, 40, 16), 100.0, torch.float32, extreme=True))
    o = log_attention_one_chunk(q, k, log_v)
    for t in (10, 25):
        k2, v2 = k.clone(), log_v.clone()
        k2[:, :, t] += 500.0
        v2[:, :, t] -= 900.0
        moved = log_attention_one_chunk(q, k2, v2)[:, :, :t]
        assert torch.equal(moved, o[:, :, :t]), t


def _heinsen_mixer(registry, chunk: int, dtype=torch.float32, weight_scale: float = 1.0) -> LogAttention:
    v = registry.get("heinsen")
    cfg = ModelConfig(
        vocab_size=256, d_model=32, n_layer=1, n_head=2, context=256, options=v.make_options({"chunk_size": chunk})
    )
    torch.manual_seed(0)
    mixer = v.build_mixer(cfg, 0).to(dtype).train()
    with torch.no_grad():
        mixer.c_attn.weight.mul_(weight_scale)
    assert isinstance(mixer, LogAttention)
    return mixer


@pytest.mark.parametrize("T,chunk", [(24, 64), (64, 64), (13, 16), (70, 64)])
@pytest.mark.parametrize("weight_scale", [1.0, 10.0])
def test_mixer_paths_agree_and_are_described(registry, T, chunk, weight_scale):
    """The mixer takes the one-chunk path for T <= chunk_size (describe_path says which ran):
    output and every gradient equal the chunked kernel's, float64 to round-off."""
    mixer = _heinsen_mixer(registry, chunk, torch.float64, weight_scale)
    x = torch.randn(3, T, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    results = {}
    for fast in (True, False):
        mixer.one_chunk_path = fast
        xi = x.clone().requires_grad_()
        y = mixer(xi)
        grads = torch.autograd.grad(y.square().sum(), [xi, *mixer.parameters()])
        results[fast] = (y.detach(), grads, mixer.describe_path()["kernel"])
    (y1, g1, k1), (y0, g0, k0) = results[True], results[False]
    assert k0 == heinsen_model.CHUNKED_KERNEL
    assert k1 == (heinsen_model.ONE_CHUNK_KERNEL if chunk >= T else heinsen_model.CHUNKED_KERNEL)
    assert rel(y1, y0) <= 1e-12
    for a, b in zip(g1, g0, strict=True):
        assert rel(a, b) <= 1e-11


# ---- future attention: dense path = lean kernels ---------------------------------------


def _future_mixer(registry, context: int, weight_scale: float, dtype, **options) -> FutureAttention:
    v = registry.get("future")
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layer=1, n_head=2, context=context, options=v.make_options(options))
    torch.manual_seed(0)
    mixer = v.build_mixer(cfg, 0)
    assert isinstance(mixer, FutureAttention)
    with torch.no_grad():
        for p in mixer.parameters():
            torch.nn.init.normal_(p, std=0.3 * weight_scale)
    return mixer.to(dtype).train()


def _future_run(mixer: FutureAttention, x: torch.Tensor, dense: bool):
    """(kernel, [y, aux, grad x, grads of the parameters]) of mean(y^2) + 2 aux, in float64."""
    mixer.dense_path = dense
    xi = x.clone().requires_grad_()
    out = mixer(xi)
    aux = out.aux[0].value
    grads = torch.autograd.grad(out.y.square().mean() + 2.0 * aux, [xi, *mixer.parameters()])
    return mixer.describe_path()["kernel"], [t.detach().double() for t in (out.y, aux, *grads)]


@pytest.mark.parametrize("T,context,fd", [(24, 24, None), (64, 64, None), (29, 48, 5), (20, 48, 40)])
@pytest.mark.parametrize("weight_scale", [1.0, 10.0])
@pytest.mark.parametrize("loss_type,detach", [("mse", True), ("cosine", False)])
def test_future_dense_equals_lean(registry, T, context, fd, weight_scale, loss_type, detach):
    """Output, auxiliary loss and every gradient. Float64: equal to round-off (1e-10 of the
    largest; weights x10 put logits in the hundreds). fp32: each path against float64, the
    dense path's error at most twice the lean kernels' (or 1e-5)."""
    opts = {"future_dim": fd, "loss_type": loss_type, "detach_target": detach}
    x = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    mixer = _future_mixer(registry, context, weight_scale, torch.float64, **opts)
    (k1, dense64), (k0, lean64) = _future_run(mixer, x, True), _future_run(mixer, x, False)
    assert (k1, k0) == (DENSE_KERNEL, LEAN_KERNEL)
    for a, b in zip(dense64, lean64, strict=True):
        assert rel(a, b) <= 1e-10
    mixer = mixer.float()
    dense32, lean32 = _future_run(mixer, x.float(), True)[1], _future_run(mixer, x.float(), False)[1]
    for i, (a, b, ref) in enumerate(zip(dense32, lean32, lean64, strict=True)):
        assert rel(a, ref) <= max(2 * rel(b, ref), 1e-5), (i, rel(a, ref), rel(b, ref))


def test_future_takes_the_lean_path_with_dropout_or_past_one_block(registry, monkeypatch):
    from attnbench.plugins.kernels import lse_merge

    mixer = _future_mixer(registry, 24, 1.0, torch.float32)
    x = torch.randn(2, 24, 32)
    mixer(x)
    assert mixer.describe_path()["kernel"] == DENSE_KERNEL
    monkeypatch.setattr(lse_merge, "SCORE_BLOCK_ELEMENTS", 2 * 2 * 24 * 47 - 1)  # one element short
    mixer(x)
    assert mixer.describe_path()["kernel"] == LEAN_KERNEL
    monkeypatch.undo()
    mixer.dropout = 0.1
    mixer(x)
    assert mixer.describe_path()["kernel"] == LEAN_KERNEL
