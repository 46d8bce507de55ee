"""The `additive` and `windowed` variants (plugins/attention/additive.py): faithfulness to the
reference formulation (spec 2.1-2.4), sound window sums, decoding, causality, options."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbench import Backbone, ModelConfig
from attnbench.contract.variant import state_numel
from attnbench.nn.model import lm_loss
from attnbench.plugins.kernels.additive import PoolSpec, pool
from attnbench.registry.loader import load_registry
from attnbench.store.database import Store
from tests.helpers import grad, mixers, run_cli, write_suite


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def make_config(registry, name: str, options: dict | None = None, **model) -> ModelConfig:
    base = dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, context=256)
    return ModelConfig(**{**base, **model}, options=registry.get(name).make_options(options))


# --- the reference formulation, written from the spec: prefix sums minus shifted prefix sums


def ref_norm(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)  # unbiased std


def ref_pool(x: torch.Tensor, w: torch.Tensor, s: float, k: int, eps: float) -> torch.Tensor:
    """x (B, T, H, h), w (H, h): cumsum(e^a x^) - same shifted by k, over cumsum(e^a) - shifted, + eps."""
    T, h = x.size(1), x.size(-1)
    xn = ref_norm(x)
    e = torch.exp((xn * ref_norm(w)).sum(-1) / h * s)  # (B, T, H) no max-subtraction
    num, z = (e[..., None] * xn).cumsum(1), e.cumsum(1)
    if k < T:
        num = num - F.pad(num, (0, 0, 0, 0, k, 0))[:, :T]
        z = z - F.pad(z, (0, 0, k, 0))[:, :T]
    return num / (z + eps)[..., None]


def ref_attention(m, x: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """FastSelfAttention (spec 2.3) from the module's parameters, in `dtype`."""
    B, T, D = x.shape
    x = x.to(dtype)
    if isinstance(m.attn_norm, torch.nn.LayerNorm):
        x = F.layer_norm(x, (D,), m.attn_norm.weight.to(dtype), m.attn_norm.bias.to(dtype))
    q, k, v = (x @ m.qkv.weight.to(dtype).T).split(D, -1)
    q, k, v = (t.reshape(B, T, m.n_head, -1) for t in (q, k, v))
    s, eps = m.spec.rescale, 1e-5 if m.spec.eps_compat else 0.0
    gq = ref_pool(q, m.query_attn.to(dtype), s, m.window, eps)
    gk = ref_pool(gq * k, m.key_attn.to(dtype), s, m.window, eps)
    return (gk * v).flatten(2)


def ref_model_logits(model, idx: torch.Tensor) -> torch.Tensor:
    """The b587c27 LM (spec 2.4) in float64 from the model's parameters."""
    d, f64 = model.config.d_model, torch.float64

    def ln(mod, x):
        return F.layer_norm(x, (d,), mod.weight.to(f64), mod.bias.to(f64))

    u = (model.wte.weight[idx] + model.wpe.weight[: idx.size(1)]).to(f64)
    for layer in model.layers:
        u = u + ref_attention(layer.attn, u)
        u = u + F.gelu(ln(layer.mlp_norm, u) @ layer.up.weight.to(f64).T) @ layer.down.weight.to(f64).T
    return ln(model.ln_f, u) @ model.wte.weight.to(f64).T + model.proj_logits.bias.to(f64)


# --- registration and options


def test_registered_with_published_defaults(registry):
    add, win = registry.get("additive"), registry.get("windowed")
    assert (add.decode, win.decode) == ("recurrent", "window")
    assert add.build_model is not None and win.build_model is not None
    assert add.make_options({}).rescale == 15.0 and win.make_options({}).rescale == 10.0
    published = win.make_options({"windows": [4, 8, 16, 32, 64, 2048], "rescale": 10})
    assert published.windows == (4, 8, 16, 32, 64, 2048)
    assert not add.make_options({}).eps_compat and not win.make_options({}).eps_compat
    for bad in (
        {"rescale": 0},
        {"rescale": 41},
        {"rescale": "15"},
        {"eps_compat": "yes"},
        {"block": 0},
        {"windows": [4, 0]},
        {"windows": "nope"},
        {"windows": []},
    ):
        with pytest.raises(ValueError, match="invalid options"):
            win.make_options(bad)


def test_window_rules_produce_documented_lists(registry):
    expected = {
        "seeds": [4, 8, 16, 32, 64, 2048],
        "head": [2048, 4, 8, 16, 32, 2048],
        "readme": [2048, 8, 16, 32, 64, 2048],
    }
    win = registry.get("windowed")
    for rule, windows in expected.items():
        config = ModelConfig(
            vocab_size=16, d_model=8, n_layer=6, n_head=2, context=2048, options=win.make_options({"windows": rule})
        )
        assert [m.window for m in mixers(Backbone(config, win.build_mixer))] == windows, rule
    assert [layer.attn.window for layer in win.build_model(config).layers] == expected["readme"]
    wrong = make_config(registry, "windowed", {"windows": [4, 8, 16]})
    with pytest.raises(ValueError, match="3 windows .* 2 layers"):
        Backbone(wrong, win.build_mixer)


# --- faithfulness


@pytest.mark.parametrize(
    "name,options",
    [
        ("additive", {}),
        ("additive", {"eps_compat": True, "rescale": 7}),
        ("windowed", {"windows": [5, 16, 256]}),
        ("windowed", {"windows": [1, 24, 96], "eps_compat": True, "rescale": 15}),
    ],
)
def test_mixer_matches_reference_formulation(registry, name, options):
    config = make_config(registry, name, options, n_layer=3)
    torch.manual_seed(0)
    model = Backbone(config, registry.get(name).build_mixer)
    x = torch.randn(2, 96, 32)
    for mixer in mixers(model):
        assert (mixer(x) - ref_attention(mixer, x)).abs().max() < 1e-5


@pytest.mark.parametrize("name,options", [("additive", {}), ("windowed", {"windows": [3, 256]})])
def test_own_model_is_the_reference_lm(registry, name, options):
    config = make_config(registry, name, options)
    torch.manual_seed(0)
    model = registry.get(name).build_model(config).eval()
    idx = torch.randint(0, 64, (2, 40))
    out = model(idx, targets=idx.roll(-1, 1))
    assert (out.logits - ref_model_logits(model, idx)).abs().max() < 1e-5
    ref_loss = lm_loss(out.logits, idx.roll(-1, 1)).loss
    assert out.loss is not None and ref_loss is not None and torch.equal(out.loss, ref_loss)
    assert model.proj_logits.weight is model.wte.weight and model.proj_logits.bias is not None
    assert all(isinstance(layer.attn.attn_norm, torch.nn.LayerNorm) for layer in model.layers)


def test_own_model_parameter_count_matches_the_notebook(registry):
    published = dict(vocab_size=32100, d_model=128, n_layer=6, n_head=4, context=2048)
    for name in ("additive", "windowed"):
        n = registry.get(name).build_model(make_config(registry, name, None, **published)).num_params()
        assert n == 5_489_252 and round(n / 1e6, 1) == 5.5  # the notebook prints 5.5M


# --- numerics


def direct_window_pool(x: torch.Tensor, w: torch.Tensor, s: float, k: int) -> torch.Tensor:
    """float64, one explicit sum per window: unfold gives each position its own k entries."""
    xn = ref_norm(x.double())
    e = torch.exp((xn * ref_norm(w.double())).sum(-1) / x.size(-1) * s)  # (B, T, H)
    terms = torch.cat([e[..., None] * xn, e[..., None]], -1)  # (B, T, H, h+1)
    windows = F.pad(terms, (0, 0, 0, 0, k - 1, 0)).unfold(1, k, 1)  # (B, T, H, h+1, k)
    sums = windows.sum(-1)  # (B, T, H, h+1)
    return sums[..., :-1] / sums[..., -1:]


def test_windowed_sums_survive_where_prefix_mass_dwarfs_window_mass():
    """First half: logits near +s; second half: near -s. Prefix/window mass ~ e^{2s} T."""
    torch.manual_seed(0)
    T, h, s, k = 16384, 8, 10.0, 4
    w = torch.randn(1, h)
    direction = ref_norm(w)[0]
    sign = torch.where(torch.arange(T) < T // 2, 1.0, -1.0)[:, None]  # (T, 1)
    x = (sign * direction + 0.3 * torch.randn(T, h))[None, :, None, :]  # (1, T, 1, h)
    exact = direct_window_pool(x, w, s, k)
    ours = pool(x, w, PoolSpec(s, False, 256), k)
    scale = exact.abs().max()
    assert (ours.double() - exact).abs().max() <= 1e-5 * scale
    # The reference formulation (its eps included) loses everything to cancellation in fp32.
    cancelled = ref_pool(x, w, s, k, 1e-5).double() - ref_pool(x.double(), w.double(), s, k, 1e-5)
    assert cancelled.abs().max() > 1e-2 * scale


def test_eps_compat_shrinks_small_windows_as_the_reference_does():
    torch.manual_seed(0)
    h, s, k, T = 32, 10.0, 4, 32  # the published head size
    w = torch.randn(1, h)
    low = (-ref_norm(w)[0] + 0.05 * torch.randn(T, h))[None, :, None, :]  # logits near -s
    exact, compat = pool(low, w, PoolSpec(s, False, 256), k), pool(low, w, PoolSpec(s, True, 256), k)
    xn = ref_norm(low.double())
    z = torch.exp((xn * ref_norm(w.double())).sum(-1) / h * s)  # (1, T, 1) e^{a}, no shift
    z = F.pad(z, (0, 0, k - 1, 0)).unfold(1, k, 1).sum(-1)  # (1, T, 1) window sums of e^{a}
    shrink = (z / (z + 1e-5))[..., None]  # the reference's factor
    assert torch.allclose(compat.double(), exact.double() * shrink, atol=1e-6)
    assert 0.03 < 1 - shrink[:, k:].mean() < 0.08  # "shrunk by ~5%" (spec 2.8, item 2)
    assert torch.allclose(ref_pool(low.double(), w.double(), s, k, 1e-5), compat.double(), atol=1e-5)


@pytest.mark.parametrize("window", [3, 100])
@pytest.mark.parametrize("eps_compat", [False, True])
def test_pool_backward_matches_finite_differences(window, eps_compat):
    torch.manual_seed(0)
    x = torch.randn(2, 11, 2, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    spec = PoolSpec(3.0, eps_compat, 4)
    assert torch.autograd.gradcheck(lambda x, w: pool(x, w, spec, window), (x, w))


@pytest.mark.parametrize(
    "name,options", [("additive", {"rescale": 40}), ("windowed", {"windows": [4, 64], "rescale": 40})]
)
def test_finite_on_long_inputs_scaled_tenfold(registry, name, options):
    torch.manual_seed(0)
    mixer = mixers(Backbone(make_config(registry, name, options, context=4096), registry.get(name).build_mixer))[1]
    x = (10 * torch.randn(1, 4096, 32)).requires_grad_()
    y = mixer(x)
    y.square().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(grad(x)).all()
    half = pool(10 * torch.randn(1, 4096, 4, 8).half(), mixer.query_attn, mixer.spec, mixer.window)
    assert half.dtype == torch.float32 and torch.isfinite(half).all()  # sums never run in half


def test_cpu_bf16_autocast_stays_close(registry):
    torch.manual_seed(0)
    mixer = mixers(
        Backbone(make_config(registry, "windowed", {"windows": [4, 256]}), registry.get("windowed").build_mixer)
    )[0]
    x = torch.randn(1, 24, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mixer(x)
    assert torch.isfinite(y).all() and (y.float() - mixer(x)).abs().max() < 0.05 * mixer(x).abs().max()


# --- causality and decoding


@pytest.mark.parametrize("name,options", [("additive", {}), ("windowed", {"windows": [3, 7]})])
def test_no_future_leak(registry, name, options):
    torch.manual_seed(0)
    model = Backbone(make_config(registry, name, options), registry.get(name).build_mixer).eval()
    idx, t = torch.randint(0, 64, (1, 40)), 17
    other = idx.clone()
    other[:, t + 1 :] = torch.randint(0, 64, (1, 40 - t - 1))
    assert torch.equal(model(idx).logits[:, : t + 1], model(other).logits[:, : t + 1])
    x = torch.randn(1, 40, 32, requires_grad=True)
    for mixer in mixers(model):
        x.grad = None
        mixer(x)[0, t].sum().backward()
        assert torch.equal(grad(x)[:, t + 1 :], torch.zeros_like(grad(x)[:, t + 1 :]))
        assert grad(x)[:, : t + 1].abs().sum() > 0


def decode(model, idx: torch.Tensor, chunk: int, max_len: int | None = None):
    state = model.init_state(idx.size(0), max_len or idx.size(1))
    outs = []
    for start in range(0, idx.size(1), chunk):
        logits, state = model.step(idx[:, start : start + chunk], state)
        outs.append(logits)
    return torch.cat(outs, 1), state


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("name,options", [("additive", {}), ("windowed", {"windows": [8, 256]})])
def test_incremental_matches_parallel_at_four_times_the_largest_window(registry, name, options, own):
    variant = registry.get(name)
    config = make_config(registry, name, options)
    torch.manual_seed(0)
    model = (variant.build_model(config) if own else Backbone(config, variant.build_mixer)).eval()
    T = 4 * 8
    idx = torch.randint(0, 64, (2, T))
    with torch.no_grad():
        full = model(idx).logits
        for chunk in (1, 3, 7, T):
            logits, state = decode(model, idx, chunk)
            assert (logits - full).abs().max() < 1e-5, chunk
    if not own:  # declared state size holds for every layer
        _, state = decode(model, idx[:1], 7)
        assert [state_numel(s) for s in state.layers] == [variant.state_size(config, i, T) for i in range(2)]


def test_window_wider_than_the_decode_keeps_running_sums_only(registry):
    variant = registry.get("windowed")
    config = make_config(registry, "windowed", {"windows": [4, 16]})
    torch.manual_seed(0)
    model = Backbone(config, variant.build_mixer).eval()
    idx = torch.randint(0, 64, (1, 12))
    with torch.no_grad():
        logits, state = decode(model, idx, 5)
        assert (logits - model(idx).logits).abs().max() < 1e-5
    assert [s.query.dim() for s in state.layers] == [4, 3]  # ring of 4; sums (16 >= 12)
    assert [state_numel(s) for s in state.layers] == [variant.state_size(config, i, 12) for i in range(2)]
    assert variant.state_size(config, 1, 64) == 16 * variant.state_size(config, 1, 12)


# --- end to end


SUITE = """
    version: 1
    name: additive-e2e
    defaults:
      data: {{source: builtin, max_bytes: 100000}}
      model: {{d_model: 32, n_layer: 2, n_head: 2}}
      train: {{batch_size: 2, seq_len: 32, lr: 1.0e-2, warmup_steps: 1, eval_interval: 4, eval_tokens: 256,
              log_interval: 2, checkpoint: false}}
    experiments:
      - name: trio
        kind: train
        variants: [softmax, additive, windowed]
        variant_options: {{additive: {{rescale: 15}}, windowed: {{windows: [4, 32], rescale: 10}}}}
        train: {{budget: {{steps: 4}}}}
      - name: own
        kind: train
        variants: [windowed]
        variant_options: {{windowed: {{windows: [4, 32]}}}}
        train: {{budget: {{steps: 4}}, model_kind: own}}
"""


def test_trains_in_a_suite_beside_softmax(tmp_path):
    suite = write_suite(tmp_path / "s.yaml", SUITE.format())
    proc = run_cli("run", str(suite), "--store", str(tmp_path / "store.sqlite"))
    assert proc.returncode == 0, proc.stderr
    with Store(tmp_path / "store.sqlite") as store:
        runs = store.runs(suite="additive-e2e")
    assert sorted(r["variant"] for r in runs) == ["additive", "softmax", "windowed", "windowed"]
    assert all(r["status"] == "done" for r in runs)
