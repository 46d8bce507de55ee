"""Agreement with the references' equations (issue 17), same weights, float64 re-statements
written from the papers and shared/design/variants.md, at init and at trained magnitudes;
and the options that match the references where ours differ by default."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnbench import ModelConfig
from attnbench.gate.checks import run_checks
from attnbench.plan.suite import load_suite
from tests.helpers import REPO, run_cli, write_suite

FEATURE_MAPS = ("elu", "relu", "softmax", "taylor", "performer")


def linear_config(registry, feature_map: str, **opts) -> ModelConfig:
    options = registry.get("linear").make_options({"feature_map": feature_map, "chunk_size": 16, **opts})
    return ModelConfig(vocab_size=256, d_model=32, n_layer=1, n_head=2, context=256, options=options)


def phi64(name: str, x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Each feature map from its paper, float64, (T, h) -> (T, F)."""
    h = x.shape[-1]
    if name == "elu":  # Katharopoulos et al. 2020, eq. 7
        return torch.where(x > 0, x + 1, torch.exp(x))
    if name == "relu":
        return x.clamp_min(0)
    if name == "softmax":  # normalised over the head dimension
        return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    if name == "performer" and w is not None:  # FAVOR+ positive features of exp(q.k / sqrt(h)), no stabiliser
        xs = x / h**0.25
        return torch.exp(xs @ w.T - (xs * xs).sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[0])
    raise ValueError(name)


def linear64(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w, eps: float) -> torch.Tensor:
    """o_i = sum_{j<=i} K(q_i, k_j) v_j / (sum_{j<=i} K(q_i, k_j) + eps), one head, (T, h)."""
    T, h = q.shape
    if name == "taylor":  # Based: the kernel itself, 1 + q.k/sqrt(h) + (q.k)^2 / (2h)
        s = q @ k.T / math.sqrt(h)  # (T, T)
        a = 1 + s + s * s / 2
    else:
        a = phi64(name, q, w) @ phi64(name, k, w).T  # (T, T)
    a = a * torch.ones(T, T, dtype=a.dtype).tril()  # (T, T) causal
    return a @ v / (a.sum(-1, keepdim=True) + eps)  # (T, h)


@pytest.mark.parametrize("scale", [1.0, 4.0])
@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_linear_feature_maps_match_their_equations(registry, feature_map, scale):
    cfg = linear_config(registry, feature_map)
    torch.manual_seed(0)
    mixer = registry.get("linear").build_mixer(cfg, 0).eval()
    with torch.no_grad():
        mixer.c_attn.weight.mul_(scale)
    seen = []
    mixer.c_proj.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    x = torch.randn(1, 70, cfg.d_model, generator=torch.Generator().manual_seed(1))  # (1, T, D)
    with torch.no_grad():
        mixer(x)
        q, k, v = (t.double().view(70, 2, 16).transpose(0, 1) for t in mixer.c_attn(x).split(32, dim=2))  # (H, T, h)
    w = mixer.features.double() if feature_map == "performer" else None
    ref = torch.cat([linear64(feature_map, q[h], k[h], v[h], w, cfg.options.eps) for h in range(2)], dim=-1)  # (T, D)
    got = seen[0][0].double()  # (T, D)
    assert (got - ref).abs().max() <= 1e-5 * ref.abs().max(), feature_map


@pytest.mark.parametrize("feature_map", ["relu", "softmax", "taylor", "performer"])
def test_each_feature_map_passes_the_gate(registry, feature_map):
    variant = registry.get("linear")
    config = linear_config(registry, feature_map).replace(n_layer=2, context=512)
    results = run_checks(variant, config=config, long_T=256, time_limit_s=300)
    bad = {r.check: r.detail for r in results if r.status not in ("pass", "skip")}
    assert not bad, bad


def test_performer_features_are_drawn_once_and_kept(registry):
    cfg = linear_config(registry, "performer")
    torch.manual_seed(3)
    mixer = registry.get("linear").build_mixer(cfg, 0)
    w = mixer.features.clone()
    assert w.shape == (32, 16) and "features" in mixer.state_dict()  # 2h features, saved
    mixer.train()
    mixer(torch.randn(1, 8, 32))
    assert torch.equal(mixer.features, w)  # no redraw in training
    assert not any(p is mixer.features for p in mixer.parameters())  # not trained


SUITE = """
    version: 1
    name: t
    defaults:
      model: {d_model: 32, n_layer: 1, n_head: 2}
      train: {batch_size: 2, seq_len: 32}
    experiments:
      - name: a
        kind: train
        variants: [linear]
        variant_options: {linear: {feature_map: FMAP}}
        train: {budget: {steps: 5}}
"""


def test_validate_accepts_feature_maps_and_suggests_for_a_misspelling(tmp_path):
    ok = run_cli("validate", str(write_suite(tmp_path / "ok.yaml", SUITE.replace("FMAP", "taylor"))))
    assert ok.returncode == 0, ok.stderr
    bad = run_cli("validate", str(write_suite(tmp_path / "bad.yaml", SUITE.replace("FMAP", "perfomer"))))
    assert bad.returncode == 2
    assert "feature_map must be one of" in bad.stderr and "did you mean 'performer'?" in bad.stderr


def test_list_shows_the_options_of_each_variant():
    out = run_cli("list", "--options")
    assert out.returncode == 0, out.stderr
    assert (
        "linear: chunk_size=64; eps=1e-06; feature_map='elu' (one of elu, relu, softmax, taylor, performer)"
        in out.stdout
    )
    assert "additive: rescale=15.0; eps_compat=False" in out.stdout
    listed = json.loads(run_cli("list", "--json").stdout)
    linear = next(v for v in listed["variants"] if v["name"] == "linear")
    assert "feature_map='elu' (one of elu, relu, softmax, taylor, performer)" in linear["options"]


def test_gelu_tanh_backbone_is_gpt2_gelu_new_and_recorded():
    base = ModelConfig(vocab_size=64, d_model=16, n_layer=1, n_head=2, context=32)
    assert "activation" not in base.to_dict()  # the default leaves earlier cell keys unchanged
    cfg = base.replace(activation="gelu_tanh")
    assert cfg.to_dict()["activation"] == "gelu_tanh"
    from attnbench.nn.backbone import MLP

    torch.manual_seed(0)
    mlp = MLP(cfg).double()
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    h = mlp.c_fc(x)
    gelu_new = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))  # HF GPT-2
    assert (mlp(x) - mlp.c_proj(gelu_new)).abs().max() <= 1e-12
    exact = MLP(base).double()
    exact.load_state_dict(mlp.state_dict())
    assert (exact(x) - mlp(x)).abs().max() > 1e-6  # the two forms differ
    with pytest.raises(ValueError, match="activation must be one of"):
        base.replace(activation="relu")


def test_gelu_form_validated_in_suites(tmp_path):
    body = SUITE.replace("FMAP", "elu").replace("n_head: 2}", "n_head: 2, activation: gelu_tan}")
    bad = run_cli("validate", str(write_suite(tmp_path / "bad.yaml", body)))
    assert bad.returncode == 2 and "gelu_tanh" in bad.stderr


def test_seeds_suite_runs_the_reference_eps_and_gelu():
    suite = load_suite(REPO / "suites" / "seeds-wikitext2.yaml")
    by = {e.name: e for e in suite.experiments}
    assert by["additive"].variant_options["additive"]["eps_compat"] is True
    assert by["windowed"].variant_options["windowed"]["eps_compat"] is True
    assert all(m.activation == "gelu_tanh" for m in by["gpt2"].models)


def future64(q, k, v, Kf, Vf, bk, bv, fd: int, C: int) -> torch.Tensor:
    """Future attention (variants.md 6.3) for one head in float64, with the reference's
    biases on the future K/V projections: F = (Q K_f + b_k) / sqrt(h), y += P_band V_f + b_v."""
    T, h = q.shape
    Tw = min(T + fd, C)
    logits = torch.full((T, Tw), float("-inf"), dtype=q.dtype)  # (T, Tw) omni logits
    A = q @ k.T / math.sqrt(h)  # (T, T)
    Fs = (q @ Kf[:, : Tw - 1] + bk[:, : Tw - 1]) / math.sqrt(h)  # (T, Tw-1): column c = position c+1
    for i in range(T):
        logits[i, : i + 1] = A[i, : i + 1]
        hi = min(i + fd, Tw - 1)
        logits[i, i + 1 : hi + 1] = Fs[i, i:hi]
    P = torch.softmax(logits, dim=-1)  # (T, Tw)
    causal = torch.tril(P[:, :T])  # (T, T)
    band = P[:, 1:Tw] * torch.ones(T, Tw - 1, dtype=q.dtype).triu(0).tril(fd - 1)  # (T, Tw-1) i < j <= i+fd
    return causal @ v + band @ Vf[: Tw - 1] + bv  # (T, h)


@pytest.mark.parametrize("bias", [True, False])
def test_future_matches_the_reference_with_future_biases(registry, bias):
    C, fd, T = 24, 5, 20
    options = registry.get("future").make_options({"future_dim": fd})
    cfg = ModelConfig(vocab_size=64, d_model=16, n_layer=1, n_head=2, context=C, bias=bias, options=options)
    torch.manual_seed(0)
    mixer = registry.get("future").build_mixer(cfg, 0).double().eval()
    assert (mixer.k_future_bias is not None) == bias and (mixer.v_future_bias is not None) == bias
    with torch.no_grad():
        for p in (mixer.k_future, mixer.v_future, mixer.k_future_bias, mixer.v_future_bias):
            if p is not None:
                p.normal_(0.0, 0.5)  # trained-looking: the biases matter
    seen = []
    mixer.c_proj.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    x = torch.randn(1, T, 16, dtype=torch.float64)
    with torch.no_grad():
        mixer(x)
        q, k, v = (t.view(T, 2, 8).transpose(0, 1) for t in mixer.c_attn(x)[0].split(16, dim=-1))  # (H, T, h)
    zero = torch.zeros(2, 1, C - 1, dtype=torch.float64)
    bk = mixer.k_future_bias.detach() if bias else zero
    bv = mixer.v_future_bias.detach() if bias else torch.zeros(2, 1, 8, dtype=torch.float64)
    ref = torch.cat(
        [
            future64(q[h], k[h], v[h], mixer.k_future[h].detach(), mixer.v_future[h].detach(), bk[h], bv[h], fd, C)
            for h in range(2)
        ],
        dim=-1,
    )  # (T, D)
    assert (seen[0][0] - ref).abs().max() <= 1e-10


# -- softmax (variants.md 1.1: softmax(Q K^T / sqrt(h) + causal mask) V, then W_o) --------------


def softmax64(x: torch.Tensor, c_attn: torch.nn.Linear, c_proj: torch.nn.Linear, H: int) -> torch.Tensor:
    """Float64 causal softmax attention from the mixer's own weights, written from the equation."""
    B, T, D = x.shape
    h = D // H
    qkv = x.double() @ c_attn.weight.double().T + (c_attn.bias.double() if c_attn.bias is not None else 0)
    q, k, v = (t.view(B, T, H, h).transpose(1, 2) for t in qkv.split(D, dim=-1))  # (B, H, T, h)
    scores = q @ k.transpose(-1, -2) / math.sqrt(h)  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))  # j > i masked
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    return y @ c_proj.weight.double().T + (c_proj.bias.double() if c_proj.bias is not None else 0)


@pytest.mark.parametrize("scale", [1.0, 4.0, 16.0])
@pytest.mark.parametrize("bias", [True, False])
def test_softmax_matches_its_equation_at_trained_magnitudes(registry, scale, bias):
    config = ModelConfig(vocab_size=32, d_model=32, n_layer=1, n_head=4, context=64, bias=bias)
    torch.manual_seed(0)
    mixer = registry.get("softmax").build_mixer(config, 0).eval()
    with torch.no_grad():
        for p in mixer.parameters():
            p.mul_(scale)  # q.k logits grow as scale^2: up to ~100s at 16
    x = torch.randn(2, 40, 32)
    with torch.no_grad():
        ours = mixer(x).double()
    ref = softmax64(x, mixer.c_attn, mixer.c_proj, 4)
    assert torch.allclose(ours, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


# -- additive and windowed (variants.md 2.1-2.3, 3: rescaled logits, causal window pooling) ----


def norm64(x: torch.Tensor) -> torch.Tensor:
    """(x - mean) / (unbiased std + 1e-5) over the last axis (2.1: eps on the std)."""
    xc = x - x.mean(-1, keepdim=True)
    return xc / (xc.std(-1, unbiased=True, keepdim=True) + 1e-5)


def pool64(x: torch.Tensor, w: torch.Tensor, s: float, window: int, eps: float) -> torch.Tensor:
    """g_i = sum_{j in (i-k, i]} e^{a_j} norm(x_j) / (sum e^{a_j} + eps), a_j = norm(x_j).norm(w) / h * s."""
    xh = norm64(x.double())  # (B, T, H, h)
    a = (xh * norm64(w.double())).sum(-1) / x.size(-1) * s  # (B, T, H)
    e = a.exp()  # bounded logits: the reference exponentiates without a max (2.1)
    out = torch.empty_like(xh)
    for i in range(x.size(1)):  # a direct loop over the window, no cumsum trick
        lo = max(0, i - window + 1)
        num = (e[:, lo : i + 1, :, None] * xh[:, lo : i + 1]).sum(1)  # (B, H, h)
        out[:, i] = num / (e[:, lo : i + 1].sum(1)[..., None] + eps)
    return out


@pytest.mark.parametrize("eps_compat", [False, True])
@pytest.mark.parametrize("name,options", [("additive", {}), ("windowed", {"windows": [4]})])
def test_additive_and_windowed_match_their_equations(registry, name, options, eps_compat):
    variant = registry.get(name)
    config = ModelConfig(
        vocab_size=32,
        d_model=32,
        n_layer=1,
        n_head=4,
        context=64,
        options=variant.make_options({**options, "eps_compat": eps_compat}),
    )
    torch.manual_seed(0)
    mixer = variant.build_mixer(config, 0).eval()
    with torch.no_grad():
        mixer.qkv.weight.mul_(8.0)  # large projections: the pooled vectors are normalised anyway
    x = torch.randn(2, 24, 32)
    with torch.no_grad():
        ours = mixer(x).double()
    B, T, D, H = 2, 24, 32, 4
    q, k, v = (t.view(B, T, H, D // H) for t in (x.double() @ mixer.qkv.weight.double().T).split(D, dim=-1))
    s, window, eps = mixer.spec.rescale, mixer.window, 1e-5 if eps_compat else 0.0
    gq = pool64(q, mixer.query_attn, s, window, eps)  # (B, T, H, h)
    gk = pool64(gq * k, mixer.key_attn, s, window, eps)  # (B, T, H, h)
    ref = (gk * v).flatten(2)  # (B, T, D): no output projection (2.3)
    assert torch.allclose(ours, ref, rtol=1e-4, atol=1e-5 * ref.abs().max().item())
