"""Hybrids: models whose layers name registered variants, as a pattern repeated to n_layer or
one entry per layer. They validate, pass the gate (every layer type checked), train, decode
(= parallel), export, inspect and score through lm-eval; the report names them by pattern;
their identity covers every part's sources."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
import torch

from attnbench import ModelConfig, get_plugin_manager, load_registry
from attnbench.cli import main
from attnbench.gate.checks import run_checks
from attnbench.nn.backbone import Backbone
from attnbench.nn.checkpoint import load_checkpoint
from attnbench.plugins.attention import softmax
from attnbench.plugins.recurrent import gla
from attnbench.registry.hybrid import HybridVariant
from attnbench.registry.identity import variant_identity
from attnbench.store.database import Store
from tests import broken_variants
from tests.helpers import write_suite

PATTERN = "gated_deltanet x3 + softmax"
PER_LAYER = "softmax + gla + gla(chunk_size=4)"
SUITE = """
version: 1
name: hybrids
experiments:
  - name: text
    kind: train
    variants: [softmax]
    models:
      - {d_model: 16, n_layer: 4, n_head: 2}
      - d_model: 16
        n_layer: 4
        n_head: 2
        layers: {pattern: [gated_deltanet, gated_deltanet, gated_deltanet, softmax]}
      - {d_model: 16, n_head: 2, layers: [softmax, gla, {variant: gla, options: {chunk_size: 4}}]}
    data: {source: builtin, max_bytes: 20000}
    train: {budget: {steps: 2}, batch_size: 2, seq_len: 32, eval_interval: 2, eval_tokens: 256, log_interval: 1}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The suite run once: a plain softmax and two hybrids, 2 training steps each."""
    root = tmp_path_factory.mktemp("hybrids")
    suite, store = write_suite(root / "hybrids.yaml", SUITE), root / "store.sqlite"
    assert main(["run", str(suite), "--store", str(store)]) == 0
    with Store(store) as opened:
        runs = {r["variant"]: r for r in opened.runs()}
    return root, suite, store, runs


def _suite_with(tmp_path, model: str):
    return write_suite(
        tmp_path / "s.yaml", SUITE.replace("      - {d_model: 16, n_layer: 4, n_head: 2}\n", f"      - {model}\n", 1)
    )


def test_layers_validate_and_bad_layers_say_where_and_how_to_fix(tmp_path, capsys):
    assert main(["validate", str(write_suite(tmp_path / "ok.yaml", SUITE))]) == 0
    assert "3 cells" in capsys.readouterr().out
    cases = {
        "{d_model: 16, n_head: 2, layers: {pattern: [gla, sofmax]}}": (
            "models[0].layers.pattern[1]: unknown variant 'sofmax'. Did you mean 'softmax'?",
        ),
        "{d_model: 16, n_layer: 3, n_head: 2, layers: {pattern: [gla, softmax]}}": (
            "layers.pattern has 2 layers, which do not repeat to n_layer 3",
            "multiple of 2",
        ),
        "{d_model: 16, n_layer: 2, n_head: 2, layers: [gla, softmax, gla]}": (
            "layers lists 3 layers and n_layer is 2",
        ),
        "{d_model: 16, n_head: 2, layers: [gla, {variant: gla, options: {chunk_size: 0}}]}": (
            "models[0].layers[1]: layer 1 (gla): invalid options for variant 'gla'",
            "chunk_size",
        ),
        "{d_model: 16, n_head: 2, layers: {pattern: [gla, gla]}}": ("use one layer type only (gla)",),
    }
    for model, words in cases.items():
        assert main(["validate", str(_suite_with(tmp_path, model))]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        for w in words:
            assert w in err, (model, err)
    # --set: a model's layers from the command line; a hybrid named by its pattern in variants
    assert (
        main(
            [
                "validate",
                str(write_suite(tmp_path / "ok.yaml", SUITE)),
                "--set",
                "experiments.text.models=[{d_model: 16, n_head: 2, layers: {pattern: [gla, softmax]}}]",
            ]
        )
        == 0
    )
    assert "1 cells" in capsys.readouterr().out
    named = [
        "validate",
        str(write_suite(tmp_path / "ok.yaml", SUITE)),
        "--set",
        "experiments.text.variants=[softmax, 'gla x3 + softmax']",
    ]
    assert main([*named, "--set", "experiments.text.models=[{d_model: 16, n_layer: 4, n_head: 2}]"]) == 0
    assert "2 cells" in capsys.readouterr().out
    assert main([*named, "--set", "experiments.text.models=[{d_model: 16, n_layer: 2, n_head: 2}]"]) == 2
    assert "n_layer 2 is not a multiple of 4; change n_layer" in capsys.readouterr().err


def test_hybrids_train_pair_with_their_size_and_the_report_names_the_pattern(trained):
    root, _, _, runs = trained
    assert set(runs) == {"softmax", PATTERN, PER_LAYER}
    assert all(r["status"] == "done" for r in runs.values())
    assert runs[PATTERN]["coords"]["model"] == runs["softmax"]["coords"]["model"] == 0  # same size: paired
    cfg = ModelConfig(**{**runs[PATTERN]["config"]["model"], "options": None})
    hybrid = load_registry().get(PATTERN)
    cfg = cfg.replace(options=hybrid.make_options(None))
    state_size = hybrid.state_size
    assert state_size is not None  # every part declares one
    declared = sum(state_size(cfg, i, 32) for i in range(4))
    assert runs[PATTERN]["summary"]["state_elements"] == declared
    report = (root / "reports" / "hybrids" / "report.md").read_text()
    assert PATTERN.replace("_", "\\_") in report and "softmax + gla + gla(chunk\\_size=4)" in report


def test_attnbench_check_passes_a_hybrid_and_checks_every_layer_type(trained, capsys):
    _, _, store, _ = trained
    capsys.readouterr()
    assert main(["check", PATTERN, "--store", str(store), "--verbose"]) == 0  # the verdict the run stored
    out = capsys.readouterr().out
    assert "1/1 variants passed every check" in out
    assert "layer types gated_deltanet (layer 0), softmax (layer 3)" in out


def test_gate_fails_a_hybrid_whose_second_layer_type_leaks_at_scale():
    broken = load_registry(
        get_plugin_manager(extra_plugins=[("broken", broken_variants), ("softmax", softmax)], entry_points=False)
    )
    hybrid = broken.get("softmax + chunk_normalised")  # layer 0 is sound; layer 1 leaks at scale
    results = {r.check: r for r in run_checks(hybrid, long_T=64, time_limit_s=120)}
    assert results["leak_at_scale"].status == "fail"
    assert "worst at layer 1 (chunk_normalised)" in results["leak_at_scale"].detail


def test_each_layer_decodes_with_its_own_state_and_step_equals_forward():
    hybrid = load_registry().get(PATTERN)
    assert isinstance(hybrid, HybridVariant)
    config = ModelConfig(d_model=16, n_layer=4, n_head=2, context=96, options=hybrid.make_options(None))
    torch.manual_seed(0)
    model = Backbone(config, hybrid.build_mixer).eval()
    idx = torch.randint(0, 256, (2, 90))  # (B, T)
    with torch.no_grad():
        ref = model(idx).logits  # (B, T, V)
        state, outs = model.init_state(2, 90), []
        for a, b in ((0, 1), (1, 8), (8, 72), (72, 90)):
            logits, state = model.step(idx[:, a:b], state)  # (B, b - a, V)
            outs.append(logits)
    assert torch.allclose(torch.cat(outs, dim=1), ref, rtol=0, atol=1e-4 * float(ref.abs().max()))
    kinds = [type(s).__name__ for s in state.layers]
    assert kinds[0] == kinds[1] == kinds[2] != kinds[3]  # recurrent states, then a KV cache
    assert hybrid.layer_decode() == ["recurrent"] * 3 + ["kv_cache"] and hybrid.decode == "recurrent+kv_cache"


def _checkpoint(runs, variant):
    return runs[variant]["summary"]["checkpoint"]


def test_a_trained_hybrid_exports_inspects_and_scores_in_lm_eval(trained, tmp_path):
    pytest.importorskip("transformers")
    from lm_eval.api.instance import Instance
    from transformers.models.auto.modeling_auto import AutoModelForCausalLM

    from attnbench.experiments.lm_eval.model import AttnbenchLM

    _, _, _, runs = trained
    ckpt = _checkpoint(runs, PER_LAYER)
    ours, meta = load_checkpoint(ckpt, load_registry())
    assert meta.variant == PER_LAYER
    out = tmp_path / "exported"
    assert main(["export", ckpt, str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["variant"] == PER_LAYER and len(config["provenance"]["variant"]["parts"]) == 3
    hf = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True).eval()
    idx = torch.randint(0, 256, (1, 20))  # (1, T)
    with torch.no_grad():
        assert torch.allclose(hf(idx).logits, ours(idx).logits, atol=1e-5)

    assert main(["inspect", ckpt, "--text", "hello world", "--out", str(tmp_path / "maps")]) == 0
    assert {p.name for p in (tmp_path / "maps").glob("layer*.png")} == {"layer0.png", "layer1.png", "layer2.png"}

    lm = AttnbenchLM(checkpoint=ckpt, device="cpu")
    ((ll, _),) = lm.loglikelihood([Instance("loglikelihood", {}, ("hello", " world"), 0)])
    with torch.no_grad():
        ids = torch.tensor([list(b"hello world")])  # (1, 11)
        logp = torch.log_softmax(ours(ids[:, :-1]).logits.double(), dim=-1)[0, 4:]  # (6, V)
    assert ll == pytest.approx(float(logp.gather(1, ids[0, 5:, None]).sum()), abs=1e-3)


def test_identity_changes_when_a_parts_source_changes(tmp_path, monkeypatch):
    source = tmp_path / "mymix_plugin.py"
    source.write_text(
        textwrap.dedent("""
        from attnbench import Variant, hookimpl
        from attnbench.plugins.attention.softmax import flops_per_token, state_size
        from attnbench.plugins.attention.softmax_model import SoftmaxAttention

        @hookimpl
        def attnbench_register_variants(register):
            register(Variant(name="mymix", build_mixer=SoftmaxAttention, decode="kv_cache",
                             state_size=state_size, flops_per_token=flops_per_token))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("mymix_plugin")
    try:
        registry = load_registry(
            get_plugin_manager(extra_plugins=[("mymix", module), ("gla", gla)], entry_points=False)
        )
        hybrid = registry.get("gla x3 + mymix")
        before = variant_identity(hybrid)
        assert [p["name"] for p in before["parts"]] == ["gla", "gla", "gla", "mymix"]  # one period
        assert str(source) in hybrid.source_files
        source.write_text(source.read_text() + "\n# an edit of the part's source\n")
        after = variant_identity(hybrid)
        assert after["sources"] != before["sources"]
        assert after["parts"][3]["sources"] != before["parts"][3]["sources"]
        assert after["parts"][0] == before["parts"][0]  # gla's own identity is untouched
    finally:
        sys.modules.pop("mymix_plugin", None)
