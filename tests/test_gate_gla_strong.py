"""GLA at strong gates (issue 65, item 4): T 100, chunk 7, gate logits near -60..-90 (log decays of
-4..-6 per step over temperature 16, so a chunk's rows span up to ~30 nats, where the factorised
e^{G_i} e^{-G_j} was still used): the fp32 gradients of gate_up (and every other group) stay within
2x of fla's naive fp32 recurrence patched into the same mixer, both against ours in float64.
Before GLA_SPAN (rows past e^-8 take the pairwise form): gate_up.bias 3.1x, gate_up.weight 2.2x
(bias -90, seeds 0-3, weights x1/x4); the issue's own case measured 16x and 13x."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from attnbench.contract.config import ModelConfig
from attnbench.plugins.recurrent import gla_model
from attnbench.plugins.recurrent.gla import GLAOptions

pytestmark = pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="fla (the test extra) is not installed")
T, SEEDS, FACTORS, BIASES = 100, range(4), (1.0, 4.0), (-60.0, -90.0)


def _fla_gla(q, k, v, g, state, chunk, scale):
    from fla.ops.gla.naive import naive_recurrent_gla  # its scale is d_k^-0.5, as ours

    o, s = naive_recurrent_gla(*(t.transpose(1, 2) for t in (q, k, v, g)))  # (B, T, H, .) layout
    return o.transpose(1, 2), s


def _grads(mixer: torch.nn.Module, x: torch.Tensor, r: torch.Tensor) -> dict[str, torch.Tensor]:
    x = x.clone().requires_grad_()
    named = list(mixer.named_parameters())
    found = torch.autograd.grad((mixer(x).double() * r).sum(), [x] + [p for _, p in named])
    return dict(zip(["input"] + [n for n, _ in named], found, strict=True))


def _mixer(seed: int, factor: float, bias: float) -> torch.nn.Module:
    torch.manual_seed(seed)
    options = GLAOptions(chunk_size=7)
    config = ModelConfig(vocab_size=256, d_model=32, n_layer=2, n_head=2, context=512, options=options)
    mixer = gla_model.GatedLinearAttention(config, 0).train()
    with torch.no_grad():
        for p in mixer.parameters():
            if p.dim() >= 2:
                p.mul_(factor)
        mixer.gate_up.bias.fill_(bias)  # strong gates: log decays of bias / 16 per step
    return mixer


def test_gla_strong_gate_gradients_stay_within_2x_of_flas_fp32(monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    worst: dict[str, dict[str, float]] = {"ours": {}, "fla": {}}
    try:
        for seed, factor, bias in ((s, f, b) for s in SEEDS for f in FACTORS for b in BIASES):
            mixer = _mixer(seed, factor, bias)
            gen = torch.Generator().manual_seed(seed)
            x = torch.randn(2, T, 32, generator=gen)  # (B, T, D)
            r = torch.randn(2, T, 32, generator=gen, dtype=torch.float64)  # (B, T, D) cotangent
            truth = _grads(copy.deepcopy(mixer).double(), x.double(), r)
            for who in worst:
                with monkeypatch.context() as patch:
                    if who == "fla":
                        patch.setattr(gla_model, "gated_linear_attention", _fla_gla)
                    got = _grads(mixer, x, r)
                for name, ref in truth.items():
                    err = float((got[name].double() - ref).abs().max() / ref.abs().max())
                    worst[who][name] = max(worst[who].get(name, 0.0), err)
    finally:
        torch.set_num_threads(threads)
    ratios = {name: worst["ours"][name] / worst["fla"][name] for name in worst["ours"]}
    assert ratios["gate_up.bias"] <= 2 and ratios["gate_up.weight"] <= 2, ratios
    assert max(ratios.values()) <= 10, ratios
