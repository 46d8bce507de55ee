"""Future attention (spec section 6): lean path = explicit formulation, decoding = parallel
form, no leak on the inference path, the auxiliary loss through the model contract."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from attnbench import Backbone, MixerOutput, ModelConfig
from attnbench.contract.variant import state_numel
from attnbench.plugins.attention.future_model import FutureAttention
from attnbench.plugins.attention.softmax_model import SoftmaxAttention
from attnbench.plugins.kernels import lse_merge
from attnbench.plugins.kernels.lse_merge import causal_attention_lse
from attnbench.registry.loader import load_registry
from attnbench.store.database import Store
from tests.helpers import grad, mixers, run_cli, write_suite
from tests.references.future_reference import reference_attention, reference_forward


@functools.cache
def _variant():
    """The registered future variant (loaded on first use, never at import)."""
    return load_registry().get("future")


@pytest.fixture(params=["default-blocks", "small-blocks"])
def blocks(request, monkeypatch):
    """Run with the default block sizes (one block at test sizes) and with tiny ones (many
    blocks, a partial last block), so the multi-block paths are exercised too."""
    if request.param == "small-blocks":
        monkeypatch.setattr(lse_merge, "SCORE_BLOCK_ELEMENTS", 1)  # 16-row query blocks
        monkeypatch.setattr(lse_merge, "BAND_BLOCK", 8)
    return request.param


def _config(context=48, d=32, heads=4, n_layer=1, vocab=64, **options) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab,
        d_model=d,
        n_head=heads,
        n_layer=n_layer,
        context=context,
        options=_variant().make_options(options),
    )


def _mixer(config: ModelConfig, std: float = 0.3) -> FutureAttention:
    """A bare future layer with large weights, so attention is far from uniform."""
    torch.manual_seed(0)
    mixer = _variant().build_mixer(config, 0)
    assert isinstance(mixer, FutureAttention)
    for p in mixer.parameters():
        torch.nn.init.normal_(p, std=std)
    return mixer


def _fwd_bwd(fn, mixer, x):
    """Output, aux value and all gradients of  mean(y^2) + 2 * aux."""
    mixer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    out = fn(x)
    assert isinstance(out, MixerOutput) and [a.name for a in out.aux] == ["future_attn"]
    aux = out.aux[0].value
    (out.y.square().mean() + 2.0 * aux).backward()
    grads = [grad(x)] + [grad(p) for p in mixer.parameters()]
    return out.y.detach(), aux.detach(), grads


@pytest.mark.parametrize("loss_type", ["mse", "cosine"])
@pytest.mark.parametrize("detach", [True, False])
@pytest.mark.parametrize("T,fd", [(48, 5), (29, 5), (48, 47), (20, 40)])
def test_lean_equals_explicit_outputs_aux_and_gradients(loss_type, detach, T, fd, blocks):
    mixer = _mixer(_config(future_dim=fd, loss_type=loss_type, detach_target=detach)).train()
    x = torch.randn(2, T, 32)
    y, aux, grads = _fwd_bwd(mixer, mixer, x)
    y_ref, aux_ref, grads_ref = _fwd_bwd(lambda x: reference_forward(mixer, x), mixer, x)
    assert (y - y_ref).abs().max() <= 1e-5
    assert abs(aux - aux_ref) <= 1e-5 and aux > 0
    for g, g_ref in zip(grads, grads_ref, strict=True):
        assert (g - g_ref).abs().max() <= 1e-5
    # The target carries gradient exactly when it is not detached: the grads differ.
    mixer.opts = _variant().make_options(dict(future_dim=fd, loss_type=loss_type, detach_target=not detach))
    other = _fwd_bwd(mixer, mixer, x)[2]
    assert (other[0] - grads[0]).abs().max() > 1e-6


def test_reference_matches_a_per_row_loop():
    """The explicit formulation itself, against section 6.3 written row by row (T < C)."""
    torch.manual_seed(1)
    T, C, fd, h = 6, 9, 4, 3
    q, k, v = (torch.randn(1, 1, T, h, dtype=torch.float64) for _ in range(3))
    kf, vf = torch.randn(1, h, C - 1, dtype=torch.float64), torch.randn(1, C - 1, h, dtype=torch.float64)
    y, _ = reference_attention(q, k, v, kf, vf, fd, C)
    for i in range(T):
        keys = [k[0, 0, j] for j in range(i + 1)] + [kf[0, :, j - 1] for j in range(i + 1, min(i + fd, C - 1) + 1)]
        vals = [v[0, 0, j] for j in range(i + 1)] + [vf[0, j - 1] for j in range(i + 1, min(i + fd, C - 1) + 1)]
        w = torch.softmax(torch.stack([q[0, 0, i] @ kk for kk in keys]) / math.sqrt(h), 0)
        assert torch.allclose(y[0, 0, i], (w[:, None] * torch.stack(vals)).sum(0))


def test_causal_kernel_gradients_with_dropout_and_offset(monkeypatch):
    """The blocked kernel's hand-written backward (output and LSE) against finite differences."""
    monkeypatch.setattr(lse_merge, "SCORE_BLOCK_ELEMENTS", 1)
    monkeypatch.setattr(lse_merge, "MIN_QUERY_BLOCK", 2)  # blocks of rows 0-1, 2-3, 4
    torch.manual_seed(2)
    q = torch.randn(1, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 2, 8, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))

    def f(q, k, v):
        out, lse = causal_attention_lse(q, k, v, offset=3, dropout_p=0.3, seed=7)
        return out, lse

    assert torch.autograd.gradcheck(f, (q, k, v))
    out1, _ = f(q, k, v)
    out0, _ = causal_attention_lse(q, k, v, offset=3)
    assert not torch.allclose(out0, out1)  # dropout is active and replayed from the seed


def _model(n_layer=4, context=40, **options) -> Backbone:
    torch.manual_seed(0)
    return Backbone(_config(context=context, n_layer=n_layer, **options), _variant().build_mixer)


def test_layer_range_and_aux_aggregation_through_the_model():
    model = _model(start_layer=2, end_layer=3, future_dim=6, loss_coeff=0.5).train()
    layers = mixers(model)
    assert [type(m) for m in layers] == [SoftmaxAttention, FutureAttention, FutureAttention, SoftmaxAttention]
    C, H, h = 40, 4, 8
    assert layers[1].k_future.shape == (H, h, C - 1)
    assert layers[1].v_future.shape == (H, C - 1, h)
    plain = Backbone(_config(context=40, n_layer=4), SoftmaxAttention)
    bias = H * (C - 1) + H * h  # future K/V biases (bias on, as the reference)
    assert model.num_params() - plain.num_params() == 2 * (2 * 32 * (C - 1) + bias)

    per_layer = []
    hooks = [m.register_forward_hook(lambda m, i, o: per_layer.append(o.aux[0].value.detach())) for m in layers[1:3]]
    idx = torch.randint(0, 64, (2, 33))  # T < C
    out = model(idx, idx)
    for hook in hooks:
        hook.remove()
    mean = torch.stack(per_layer).mean()
    assert out.loss is not None and out.ce is not None
    assert set(out.aux) == {"future_attn"} and torch.allclose(out.aux["future_attn"], mean)
    assert torch.allclose(out.loss - out.ce, 0.5 * mean, rtol=0, atol=1e-6)  # fp32 loss ~ 3.8
    out.loss.backward()
    lean_grads = [grad(p).clone() for p in model.parameters()]

    model.zero_grad()
    for m in layers[1:3]:  # the same model through the explicit formulation
        m.forward = functools.partial(reference_forward, m)
    ref = model(idx, idx)
    assert ref.loss is not None and abs(ref.loss - out.loss) <= 1e-5
    ref.loss.backward()
    for g, g_ref in zip(lean_grads, (grad(p) for p in model.parameters()), strict=True):
        assert (g - g_ref).abs().max() <= 1e-5

    model.eval()
    evaluated = model(idx, idx)
    assert evaluated.aux == {} and evaluated.loss is not None and evaluated.ce is not None
    assert torch.equal(evaluated.loss, evaluated.ce)


def test_loss_switch_off_and_option_validation():
    model = _model(n_layer=2, context=30, use_future_attn_loss=False).train()
    assert mixers(model)[0].opts.future_dim == 29  # default: min(50, context - 1)
    out = model(torch.randint(0, 64, (1, 20)), torch.randint(0, 64, (1, 20)))
    assert out.aux == {} and out.loss is not None and out.ce is not None and torch.equal(out.loss, out.ce)
    bad = [
        {"future_dim": 0},
        {"loss_type": "l1"},
        {"loss_coeff": 0.0},
        {"start_layer": 3, "end_layer": 2},
        {"future_dim": True},
        {"detach_target": "yes"},
    ]
    for raw in bad:
        with pytest.raises(ValueError):
            _variant().make_options(raw)
    with pytest.raises(ValueError, match=r"future_dim must be in \[1, context - 1\] = \[1, 39\]"):
        _model(context=40, future_dim=40)
    with pytest.raises(ValueError, match="n_layer"):
        _model(n_layer=2, end_layer=3)


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_incremental_decoding_equals_parallel_form_up_to_context(chunk, blocks):
    model = _model(n_layer=2, context=64, future_dim=9, start_layer=2).eval()
    idx = torch.randint(0, 64, (2, 64))  # the whole context
    with torch.no_grad():
        full = model(idx).logits
        state, outs = model.init_state(2, 64), []
        for s in range(0, 64, chunk):
            logits, state = model.step(idx[:, s : s + chunk], state)
            outs.append(logits)
    assert (torch.cat(outs, 1) - full).abs().max() <= 1e-5
    for i in range(2):
        assert state_numel(state.layers[i]) == 2 * 64 * 32 * 2  # batch 2
        state_size = _variant().state_size
        assert state_size is not None and state_size(model.config, i, 64) == 2 * 64 * 32


@pytest.mark.parametrize("T", [20, 30])  # band inside the context; band cut at C - 1
def test_attention_maps_use_the_forward_scores_with_future_key_biases(T):
    """Issue 28: the maps' causal weights applied to V give the causal part of the output of
    6.3 with the future K/V biases on; the maps used to leave b_k out of the band scores."""
    config = _config(context=32, future_dim=8)
    mixer = _mixer(config).eval()  # every parameter ~ N(0, 0.3^2), the biases too
    assert mixer.k_future_bias is not None and mixer.k_future_bias.abs().max() > 0.5
    x = torch.randn(2, T, config.d_model, generator=torch.Generator().manual_seed(7))  # (B, T, D)
    maps = _variant().attention_maps
    assert maps is not None
    w = maps(mixer, x)  # (B, H, T, T)
    with torch.no_grad():
        q, k, v = mixer._heads(x)  # (B, H, T, h)
        y, out_future = reference_attention(
            q,
            k,
            v,
            mixer.k_future,
            mixer.v_future,
            8,
            config.context,
            k_bias=mixer.k_future_bias,
            v_bias=mixer.v_future_bias,
        )
    torch.testing.assert_close(w @ v, y - out_future, rtol=1e-4, atol=1e-5)  # (B, H, T, h) causal part
    assert (w.sum(-1) < 1).all()  # the band keeps its share of every row that has one


@pytest.mark.parametrize("training", [False, True])
def test_no_future_leak_in_outputs(training):
    """Inference path (and the training output y): perturbing inputs after t leaves
    outputs <= t unchanged, and their gradient w.r.t. inputs after t is exactly zero."""
    mixer = _mixer(_config(future_dim=7)).train(training)
    T, t = 30, 12
    x = torch.randn(2, T, 32, requires_grad=True)
    out = mixer(x)
    y = out.y if training else out
    y[:, t].sum().backward()
    assert torch.all(grad(x)[:, t + 1 :] == 0) and grad(x)[:, : t + 1].abs().sum() > 0
    x2 = x.detach().clone()
    x2[:, t + 1 :] += 10 * torch.randn(2, T - t - 1, 32)
    out2 = mixer(x2)
    y2 = out2.y if training else out2
    assert torch.equal(y2[:, : t + 1], y[:, : t + 1].detach())


def test_training_shorter_than_context_and_autocast_smoke():
    model = _model(n_layer=2, context=64, future_dim=50).train()
    idx = torch.randint(0, 64, (2, 10))  # T + fd > C is fine too; the reference crashes at T < C
    out = model(idx, idx)
    assert out.loss is not None
    out.loss.backward()
    k_grad = grad(mixers(model)[0].k_future)
    assert torch.isfinite(out.loss) and torch.isfinite(k_grad).all() and k_grad[:, :, :59].abs().sum() > 0
    assert torch.all(k_grad[:, :, 59:] == 0)  # positions >= T + fd are beyond every band
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(idx[:, :8], idx[:, :8])
    assert torch.isfinite(out.loss) and torch.isfinite(out.aux["future_attn"])


SUITE = """
    version: 1
    name: future-e2e
    defaults:
      data: {{source: builtin, max_bytes: 100000}}
      model: {{d_model: 32, n_layer: 2, n_head: 2}}
      train: {{batch_size: 2, seq_len: 32, lr: 1.0e-2, warmup_steps: 1,
              eval_interval: 6, eval_tokens: 512, log_interval: 3}}
    experiments:
      - name: pair
        kind: train
        variants: [softmax, future]
        variant_options: {{future: {{future_dim: 8, loss_type: cosine}}}}
        train: {{budget: {{steps: 6}}}}
        seeds: [0]
"""


def test_trains_in_a_suite_beside_softmax_with_both_losses_stored(tmp_path):
    suite = write_suite(tmp_path / "s.yaml", SUITE.format())
    proc = run_cli("run", str(suite), "--store", str(tmp_path / "store.sqlite"))
    assert proc.returncode == 0, proc.stderr
    with Store(tmp_path / "store.sqlite") as store:
        runs = {r["variant"]: r for r in store.runs(suite="future-e2e")}
        assert set(runs) == {"softmax", "future"} and all(r["status"] == "done" for r in runs.values())
        aux = [m["value"] for m in store.metrics(runs["future"]["id"], "train/aux/future_attn")]
        assert len(aux) == 2 and all(0 < a < 1 for a in aux)
        assert len(store.metrics(runs["future"]["id"], "train/loss")) == 2
        assert store.metrics(runs["softmax"]["id"], "train/aux/future_attn") == []
