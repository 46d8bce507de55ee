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
    if name == "performer":  # FAVOR+ positive features of exp(q.k / sqrt(h)), no stabiliser
        xs = x / h ** 0.25
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
    assert "linear: chunk_size=64; eps=1e-06; feature_map='elu' (one of elu, relu, softmax, taylor, performer)" in out.stdout
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
    gelu_new = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))  # HF GPT-2
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
        logits[i, i + 1 : hi + 1] = Fs[i, i : hi]
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
    ref = torch.cat([future64(q[h], k[h], v[h], mixer.k_future[h].detach(), mixer.v_future[h].detach(),
                              bk[h], bv[h], fd, C) for h in range(2)], dim=-1)  # (T, D)
    assert (seen[0][0] - ref).abs().max() <= 1e-10
