"""`attnbench inspect` and the variants' attention maps (issue 21)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from attnbench import Backbone, ModelConfig, load_registry, merge_heads, split_heads
from attnbench.nn.checkpoint import save_checkpoint
from tests.helpers import run_cli

TEXT = "a1 b2 c3 | b2"


def _checkpoint(tmp_path, variant: str, registry, **config):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=256, d_model=32, n_layer=2, n_head=2, context=64, **config)
    model = Backbone(cfg, registry.get(variant).build_mixer)
    path = tmp_path / f"{variant}.pt"
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "config": cfg.to_dict(),
            "variant": variant,
            "model_kind": "backbone",
            "cell_key": f"key-{variant}",
            "step": 0,
        },
    )
    return path, model


@pytest.mark.parametrize(
    "variant, kind",
    [
        ("softmax", "pairwise"),
        ("linear", "pairwise"),
        ("heinsen", "pairwise"),
        ("future", "pairwise"),
        ("additive", "importance"),
        ("windowed", "importance"),
    ],
)
def test_inspect_writes_heatmaps_page_and_causal_weights(tmp_path, variant, kind):
    registry = load_registry()
    path, _ = _checkpoint(tmp_path, variant, registry)
    out = tmp_path / "out"
    proc = run_cli("inspect", str(path), "--text", TEXT, "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert (out / "layer0.png").stat().st_size > 5000 and (out / "layer1.png").is_file()
    page = (out / "index.html").read_text()
    assert 'src="layer0.png"' in page and 'src="layer1.png"' in page and variant in page
    maps = json.loads((out / "maps.json").read_text())
    T = len(TEXT)
    assert maps["variant"] == variant and maps["tokens"][:3] == ["a", "1", "␣"] and len(maps["tokens"]) == T
    for layer in maps["layers"]:
        w = torch.tensor(layer["heads"])
        assert layer["kind"] == kind and torch.isfinite(w).all() and (w >= 0).all()
        if kind == "pairwise":
            assert w.shape == (2, T, T)
            assert torch.equal(w.triu(1), torch.zeros_like(w))  # no weight on later tokens
            rows = w.sum(-1)  # future: the learned band takes the rest of each row
            assert (rows <= 1 + 1e-5).all() and (
                variant == "future" or torch.allclose(rows, torch.ones_like(rows), atol=1e-4)
            )
        else:
            assert w.shape == (2, T) and torch.allclose(w.sum(-1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize("variant", ["softmax", "linear", "heinsen"])
def test_pairwise_maps_reproduce_the_mixer_output(variant):
    """The weights are the ones the mixer applies: W V (Heinsen: log W exp(log V)), merged
    and projected, equals the mixer's own output."""
    registry = load_registry()
    v = registry.get(variant)
    torch.manual_seed(1)
    mixer: Any = v.build_mixer(ModelConfig(vocab_size=256, d_model=32, n_layer=1, n_head=2, context=64), 0).eval()
    x = torch.randn(2, 20, 32)  # (B, T, D)
    assert v.attention_maps is not None
    w = v.attention_maps(mixer, x)  # (B, H, T, T)
    values = split_heads(mixer.c_attn(x), 2)[2]  # (B, H, T, h)
    with torch.no_grad():
        mixed = torch.log(w @ values.exp()) if variant == "heinsen" else w @ values  # (B, H, T, h)
        assert torch.allclose(mixer.c_proj(merge_heads(mixed)), mixer(x), atol=1e-4)


def test_additive_importance_is_the_query_pooling_weight():
    """At the last position of global pooling, sum_j alpha_j norm(q_j) is the pooled query."""
    from attnbench.plugins.kernels.additive import normalise, pool

    registry = load_registry()
    v = registry.get("additive")
    torch.manual_seed(2)
    mixer: Any = v.build_mixer(ModelConfig(vocab_size=256, d_model=32, n_layer=1, n_head=2, context=64), 0).eval()
    x = torch.randn(1, 16, 32)  # (B, T, D)
    assert v.attention_maps is not None
    alpha = v.attention_maps(mixer, x)  # (B, H, T)
    q = mixer.qkv(x)[..., :32].view(1, 16, 2, 16)  # (B, T, H, h)
    with torch.no_grad():
        pooled = pool(q, mixer.query_attn, mixer.spec, mixer.window)[:, -1]  # (B, H, h)
        q_hat = normalise(q.clone())[0]  # (B, T, H, h)
        assert torch.allclose((alpha.transpose(1, 2)[..., None] * q_hat).sum(1), pooled, atol=1e-4)


def test_variant_without_maps_and_bad_text_give_clear_errors(tmp_path):
    registry = load_registry()
    if "toy-ema" not in registry.variants:
        pytest.skip("tests/toy_plugin is not installed")
    toy, _ = _checkpoint(tmp_path, "toy-ema", registry)
    proc = run_cli("inspect", str(toy), "--text", TEXT, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "'toy-ema' has no attention maps" in proc.stderr
    assert not (tmp_path / "o").exists()
    soft, _ = _checkpoint(tmp_path, "softmax", registry)
    proc = run_cli("inspect", str(soft), "--text", "x" * 65, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "65 bytes" in proc.stderr and "context is 64" in proc.stderr


def test_tokens_inspect_a_task_model_whose_vocabulary_is_not_bytes(tmp_path):
    registry = load_registry()
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=8192, d_model=32, n_layer=2, n_head=2, context=64)  # an MQAR-sized vocabulary
    model = Backbone(cfg, registry.get("softmax").build_mixer)
    path = tmp_path / "mqar.pt"
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "config": cfg.to_dict(),
            "variant": "softmax",
            "model_kind": "backbone",
            "cell_key": "key-mqar",
            "step": 0,
        },
    )
    out = tmp_path / "maps"
    proc = run_cli("inspect", str(path), "--tokens", "5 4100, 9 4200 5", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    maps = json.loads((out / "maps.json").read_text())
    assert maps["tokens"] == ["5", "4100", "9", "4200", "5"]
    weights = torch.tensor(maps["layers"][1]["heads"])  # (H, T, T)
    assert weights.shape == (2, 5, 5) and torch.allclose(weights.sum(-1), torch.ones(2, 5), atol=1e-5)
    proc = run_cli("inspect", str(path), "--text", "a1 b2", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "vocabulary has 8192 tokens" in proc.stderr and "--tokens" in proc.stderr
    proc = run_cli("inspect", str(path), "--tokens", "5 8192", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "[8192] outside the checkpoint's vocabulary (0..8191)" in proc.stderr
    proc = run_cli("inspect", str(path), "--tokens", "5 x", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "integer ids" in proc.stderr
    assert not (tmp_path / "o").exists()
