"""Mixer-only blocks (model ``mlp: false``, Zoology's recall models): the backbone drops the MLP
and its norm, decodes as it trains, stores and reloads the choice, and refuses what cannot honour it."""

from __future__ import annotations

import pytest
import torch
import yaml

from attnbench import Backbone, ModelConfig
from attnbench.cli import main
from attnbench.nn.checkpoint import load_checkpoint
from attnbench.store.database import Store
from tests.helpers import REPO, write_suite


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_mixer_only_blocks_hold_no_mlp_and_decode_as_they_train(registry):
    softmax = registry.get("softmax")
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layer=2, n_head=2, context=16, mlp=False)
    torch.manual_seed(0)
    with_mlp, mixer_only = Backbone(cfg.replace(mlp=True), softmax.build_mixer), Backbone(cfg, softmax.build_mixer)
    names = [n for n, _ in mixer_only.named_parameters()]
    assert not [n for n in names if ".mlp." in n or ".ln_2." in n]
    d, hidden = cfg.d_model, cfg.replace(mlp=True).mlp_width
    per_block = (d * hidden + hidden) + (hidden * d + d) + 2 * d  # MLP's two layers, LN2's gain and bias
    assert _count(with_mlp) - _count(mixer_only) == cfg.n_layer * per_block
    assert cfg.mlp_width == 0 and "mlp" in cfg.to_dict() and "mlp" not in cfg.replace(mlp=True).to_dict()

    mixer_only.eval()
    x = torch.randint(0, 32, (2, 12))  # (B, T)
    with torch.no_grad():
        full = mixer_only(x).logits  # (B, T, V)
        state = mixer_only.init_state(2, 12)
        steps = []
        for t in range(12):
            logits, state = mixer_only.step(x[:, t : t + 1], state)  # (B, 1, V)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


SUITE = """
version: 1
name: mo
defaults:
  variants: [softmax]
  seeds: [0]
  train: {batch_size: 4, seq_len: 16, lr: 1.0e-3, warmup_steps: 1, eval_interval: 3, eval_tokens: 128,
          budget: {steps: 3}}
experiments:
  - name: text
    kind: train
    models: [{d_model: 16, n_layer: 2, n_head: 2, mlp: false}, {d_model: 16, n_layer: 2, n_head: 2}]
    data: {source: builtin, max_bytes: 20000}
"""


def test_a_suite_trains_stores_and_reloads_mixer_only_models(tmp_path):
    store = tmp_path / "store.sqlite"
    assert main(["run", str(write_suite(tmp_path / "mo.yaml", SUITE)), "--store", str(store), "--no-report"]) == 0
    with Store(store) as opened:
        runs = {r["config"]["model"].get("mlp", True): r for r in opened.runs()}
    assert set(runs) == {False, True} and all(r["status"] == "done" for r in runs.values())
    lean, full = runs[False]["summary"], runs[True]["summary"]
    assert lean["n_params"] < full["n_params"]
    assert lean["fwd_flops_per_token"] < full["fwd_flops_per_token"]  # no MLP FLOPs counted
    assert lean["mixer_flops_per_token"] == full["mixer_flops_per_token"]
    ckpts = {}
    for path in (tmp_path / "checkpoints").glob("*.pt"):
        model, _ = load_checkpoint(path, registry_for_test())
        ckpts[model.config.mlp] = _count(model)
    assert ckpts == {False: lean["n_params"], True: full["n_params"]}


def registry_for_test():
    from attnbench import get_plugin_manager, load_registry

    return load_registry(get_plugin_manager())


@pytest.mark.parametrize(
    ("model", "own", "expected"),
    [
        ("{d_model: 16, n_layer: 2, n_head: 2, mlp: false, match_params: softmax}", False, "leaves no MLP"),
        ("{d_model: 16, n_layer: 1, n_head: 2, mlp: false}", True, "mlp: false applies to the shared backbone"),
        ("{d_model: 16, n_layer: 1, n_head: 2, positions: none}", True, "positions: none applies to the shared"),
    ],
)
def test_what_cannot_honour_the_model_is_refused_before_anything_runs(tmp_path, capsys, model, own, expected):
    kind = ", model_kind: own" if own else ""
    body = f"""
version: 1
name: bad
defaults:
  variants: [additive]
  seeds: [0]
  train: {{batch_size: 2, seq_len: 16, warmup_steps: 1, eval_interval: 1, eval_tokens: 64, budget: {{steps: 1}}{kind}}}
experiments:
  - name: text
    kind: train
    models: [{model}]
    data: {{source: builtin, max_bytes: 20000}}
"""
    store = tmp_path / "store.sqlite"
    code = main(["run", str(write_suite(tmp_path / "bad.yaml", body)), "--store", str(store), "--no-report"])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and "bad.yaml" in err
    if store.exists():  # refused before any cell ran
        with Store(store) as opened:
            assert opened.runs() == []


def test_the_main_jobs_recall_setting_is_learned_by_softmax_within_its_budget(tmp_path):
    """quick.yaml's recall experiment as shipped (its model, data and budget), softmax at the
    grid's rate 1e-3 on seed 0: it must form the recall circuit within quick's 1000 steps, >= 0.8
    test accuracy at every number of pairs (0.97 / 0.93 / 0.83 at 2 / 4 / 6 pairs; the measured
    nulls are 0.52 / 0.33 / 0.29). The MLP back, or a rate of 1e-2, leaves it on the 1/K plateau
    (recall-sweep)."""
    suite = yaml.safe_load((REPO / "suites" / "quick.yaml").read_text())
    [recall] = [e for e in suite["experiments"] if e["name"] == "recall"]
    recall = {k: v for k, v in recall.items() if k not in ("grid", "protocol", "variant_options")}
    recall["train"] = {**recall["train"], "lr": 1.0e-3}
    body = {
        "version": 1,
        "name": "quick-recall",
        "defaults": {"variants": ["softmax"], "seeds": [0]},
        "experiments": [recall],
    }
    path = tmp_path / "recall.yaml"
    path.write_text(yaml.safe_dump(body))
    store = tmp_path / "store.sqlite"
    assert main(["run", str(path), "--store", str(store), "--no-report"]) == 0
    with Store(store) as opened:
        [run] = opened.runs()
        test = {
            r["tags"]["num_kv_pairs"]: r["value"]
            for r in opened.results(run["id"])
            if r["name"] == "accuracy" and r["tags"].get("split") == "test"
        }
    assert sorted(test) == [2, 4, 6]
    assert min(test.values()) >= 0.8, test
