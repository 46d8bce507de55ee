"""Declared state size against the state a variant's decoding actually holds after T tokens:
the gate fails an overstatement (or understatement) with its factor, every built-in that
decodes declares its state exactly, and a hybrid's state is the sum of its layers'."""

from __future__ import annotations

import pytest
import torch

from attnbench import ModelConfig, get_plugin_manager, load_registry
from attnbench.contract.variant import state_numel
from attnbench.gate.checks import run_checks
from attnbench.nn.backbone import Backbone
from attnbench.nn.flops import model_facts
from attnbench.plugins.attention import softmax
from tests import broken_variants


@pytest.fixture(scope="module")
def broken():
    return load_registry(
        get_plugin_manager(extra_plugins=[("broken", broken_variants), ("softmax", softmax)], entry_points=False)
    )


def _facts(variant):
    results = {r.check: r for r in run_checks(variant, long_T=64, time_limit_s=120)}
    return results["declared_facts"]


def test_gate_fails_an_overstated_state_size_with_its_factor(broken):
    facts = _facts(broken.get("overstated_state"))
    assert facts.status == "fail"
    # the mixer caches K and V: 2 x 13 x 32 = 832 elements at T = 13; it declares 8 T D
    assert "layer 0, T=13: state holds 832 elements, state_size declares 3,328 (4x overstated)" in facts.detail


def test_gate_names_an_understatement_as_such(broken):
    facts = _facts(broken.get("wrong_state_size"))
    assert facts.status == "fail" and "state_size declares 416 (2x understated)" in facts.detail


def _held(mixer, config, T):
    """Elements of a mixer's decode state after T tokens stepped 1, 7 and 64 at a time."""
    state = mixer.init_state(1, T, device=torch.device("cpu"), dtype=torch.float32)
    x = torch.randn(1, T, config.d_model)  # (1, T, D)
    pos, i = 0, 0
    with torch.no_grad():
        while pos < T:
            n = min((1, 7, 64)[i % 3], T - pos)
            _, state = mixer.step(x[:, pos : pos + n], state)  # (1, n, D)
            pos, i = pos + n, i + 1
    return state_numel(state)


def test_every_builtin_that_decodes_declares_the_state_it_holds():
    registry = load_registry()
    builtins = [
        v
        for v in registry.variants.values()
        if v.distribution == "attnbench" and v.decode != "none" and v.state_size is not None
    ]
    assert {"softmax", "gla", "gated_deltanet", "mamba2", "swa"} <= {v.name for v in builtins}
    for variant in builtins:
        config = ModelConfig(d_model=16, n_layer=1, n_head=2, context=80, options=variant.make_options(None))
        torch.manual_seed(0)
        mixer = variant.build_mixer(config, 0).eval()
        state_size = variant.state_size
        assert state_size is not None  # the filter above
        for T in (13, 70):
            held, declared = _held(mixer, config, T), state_size(config, 0, T)
            assert held == declared, f"{variant.name} at T={T}: holds {held}, declares {declared}"


def test_a_hybrids_state_is_the_tuple_of_its_layers_states_and_sums_to_its_facts():
    registry = load_registry()
    hybrid = registry.get("gated_deltanet x3 + softmax")
    config = ModelConfig(d_model=16, n_layer=8, n_head=2, context=64, options=hybrid.make_options(None))
    model = Backbone(config, hybrid.build_mixer).eval()
    T = 21
    state = model.init_state(1, T)
    with torch.no_grad():
        _, state = model.step(torch.randint(0, 256, (1, T)), state)
    assert len(state.layers) == 8
    held = [state_numel(s) for s in state.layers]
    state_size = hybrid.state_size
    assert state_size is not None  # every part declares one
    assert held == [state_size(config, i, T) for i in range(8)]
    assert held[3] == held[7] == 2 * T * 16  # softmax layers: a K/V cache that grows with T
    assert held[0] == held[1] == held[2] != held[3]  # gated deltanet layers: a fixed recurrent state
    assert model_facts(hybrid, config, T)["state_elements"] == sum(held)


FAIR = """
version: 1
name: fair
experiments:
  - name: text
    kind: train
    variants: [softmax, gla, retnet]
    models:
      - {d_model: 32, n_layer: 4, n_head: 2, match_params: softmax}
      - {d_model: 32, n_layer: 4, n_head: 2, match_params: softmax, layers: {pattern: [gated_deltanet, softmax]}}
    data: {source: builtin, max_bytes: 20000}
    train: {budget: {steps: 2}, batch_size: 2, seq_len: 32}
"""


def test_match_params_sets_each_variants_mlp_width_within_2_percent(tmp_path, capsys):
    from attnbench.cli import main
    from attnbench.plan.cells import expand
    from attnbench.plan.suite import load_suite
    from attnbench.plan.validation import check_suite
    from tests.helpers import write_suite

    registry = load_registry()
    cells = {c.variant: c for c in expand(check_suite(load_suite(write_suite(tmp_path / "fair.yaml", FAIR)), registry))}
    counts = {n: Backbone(c.model, registry.get(n).build_mixer).num_params() for n, c in cells.items()}
    assert set(counts) == {"softmax", "gla", "retnet", "gated_deltanet + softmax"}
    assert cells["softmax"].model.mlp_hidden is None and "mlp_hidden" not in cells["softmax"].model.to_dict()
    for name, n in counts.items():
        assert abs(n - counts["softmax"]) <= 0.02 * counts["softmax"], (name, n, counts["softmax"])
        assert name == "softmax" or cells[name].model.mlp_hidden != 4 * 32  # the MLP took up the difference
    # without matching, gla's and retnet's mixers make them > 2% off
    plain = {
        n: Backbone(c.model.replace(mlp_hidden=None), registry.get(n).build_mixer).num_params()
        for n, c in cells.items()
    }
    assert all(abs(plain[n] - plain["softmax"]) > 0.02 * plain["softmax"] for n in ("gla", "retnet"))
    # a mixer larger than any MLP width can make up: a clear error naming the key
    big = write_suite(tmp_path / "big.yaml", FAIR.replace("[softmax, gla, retnet]", "[softmax, mamba2]"))
    assert main(["validate", str(big)]) == 2
    err = capsys.readouterr().err
    assert "models[0].match_params: 'mamba2' has" in err and "no MLP width matches them" in err
