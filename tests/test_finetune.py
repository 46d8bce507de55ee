"""The `finetune` kind: LoRA (PEFT) and full fine-tuning of a train experiment's
checkpoints, its rows, its report section, and its errors on bad input (issue 21)."""

from __future__ import annotations

import pytest

from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, write_suite

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
RECALL = (
    "{source: task, task: text_recall, task_options: {n_pairs: 2, n_queries: 2}, train_examples: 512, val_examples: 64}"
)


def _suite(tmp_path, lora: str = "ranks: [1, 2]", pretrain: str = "", extra: str = ""):
    return write_suite(
        tmp_path / "ft.yaml",
        f"""
        version: 1
        name: ft
        defaults:
          model: {{d_model: 16, n_layer: 1, n_head: 2, context: 32}}
          variants: [softmax, additive]
        experiments:
          - name: pre
            kind: train
            data: {{source: builtin}}
            train: {{budget: {{steps: 4}}, batch_size: 2, seq_len: 32, eval_tokens: 256,
                    checkpoint_interval: 0{pretrain}}}
          - name: lora
            kind: finetune
            data: {RECALL}
            finetune: {{from_experiment: pre, method: lora, {lora}, budget: {{steps: 6}}, batch_size: 4,
                       seq_len: 13, eval_tokens: 256, log_interval: 2{extra}}}
          - name: full
            kind: finetune
            data: {RECALL}
            finetune: {{from_experiment: pre, method: full, budget: {{steps: 6}}, batch_size: 4, seq_len: 13,
                       eval_tokens: 256, log_interval: 2}}
        """,
    )


def test_lora_and_full_rows_keys_and_report(tmp_path):
    pytest.importorskip("peft")
    suite, db = _suite(tmp_path), tmp_path / "s.sqlite"
    proc = run_cli("run", str(suite), "--store", str(db), env=OFFLINE)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    with Store(db) as store:
        runs = store.runs(suite="ft")
        train = {r["variant"]: r for r in runs if r["kind"] == "train"}
        tuned = [r for r in runs if r["kind"] == "finetune"]
        assert len(tuned) == 2 * 3 and all(r["status"] == "done" for r in tuned), [r["error"] for r in tuned]
        params = {}
        for r in tuned:
            rows = {x["name"]: x for x in store.results(r["id"])}
            assert r["config"]["key_inputs"]["train_cell_key"] == train[r["variant"]]["cell_key"]
            assert rows["trainable_params"]["tags"]["train_cell_key"] == train[r["variant"]]["cell_key"]
            assert 0 <= rows["accuracy"]["value"] <= 1 and rows["loss"]["value"] > 0
            params[(r["variant"], r["summary"]["rank"])] = (
                rows["trainable_params"]["value"],
                rows["total_params"]["value"],
            )
    d = 16
    # softmax mixer: c_attn (3d x d) and c_proj (d x d): r (d + 3d) + r (d + d) per layer
    assert params[("softmax", 1)][0] == 6 * d and params[("softmax", 2)][0] == 12 * d
    # additive mixer: one qkv Linear (3d x d, no bias): r (d + 3d)
    assert params[("additive", 1)][0] == 4 * d and params[("additive", 2)][0] == 8 * d
    full, total = params[("softmax", None)]
    assert full == total > 20 * params[("softmax", 2)][0]
    again = run_cli("run", str(suite), "--store", str(db), env=OFFLINE)
    assert "0 run, 8 already stored" in again.stdout, again.stdout
    out = tmp_path / "report"
    rep = run_cli("report", "--store", str(db), "--suite", "ft", "--out", str(out))
    assert rep.returncode == 0, rep.stderr
    html = next(out.rglob("*.html")).read_text()
    assert "Fine-tuning (LoRA budgets)" in html and "accuracy against LoRA rank" in html
    # Tiny Shakespeare (the pretraining text) has no digit but 27 threes: the other nine
    # answer digits are flagged, for the LoRA cells in the report
    assert {tuple(r["summary"]["unseen_answer_tokens"]) for r in tuned} == {tuple(b"012456789")}
    assert "lora: the answers include 9 token ids (48, 49, 50, 52," in html and "LoRA cannot" in html


def test_target_matching_nothing_fails_before_training(tmp_path):
    pytest.importorskip("peft")
    suite, db = _suite(tmp_path, lora="ranks: [1], target: [no_such_layer]"), tmp_path / "s.sqlite"
    run_cli("run", str(suite), "--store", str(db), "--variants", "softmax", env=OFFLINE)
    with Store(db) as store:
        bad = [r for r in store.runs(suite="ft") if r["experiment"] == "lora"]
    assert bad and bad[0]["status"] == "failed"
    assert "matches no Linear layer" in bad[0]["error"] and "blocks.0.mixer.c_attn" in bad[0]["error"]
    assert "steps" not in bad[0]["summary"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"pretrain": ", checkpoint: false"}, "keeps no checkpoints"),
        ({"lora": "ranks: [1, 64]"}, "rank 64 is larger than the model width d_model = 16"),
        ({"lora": "ranks: [1, 1]"}, "distinct positive integers"),
        ({"extra": ", checkpoint: true"}, "for method: full only"),
    ],
)
def test_bad_finetune_suites_fail_validate_naming_the_fix(tmp_path, change, words):
    suite = _suite(tmp_path, **change)
    proc = run_cli("validate", str(suite))
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr
    assert "ft.yaml:" in proc.stderr  # file:line


def test_shipped_lora_suite_validates():
    proc = run_cli("validate", str(REPO / "suites" / "lora.yaml"))
    assert proc.returncode == 0, proc.stderr


def test_lora_starts_at_the_checkpoint_and_trains_only_what_it_should(registry):
    pytest.importorskip("peft")
    import torch

    from attnbench import Backbone, ModelConfig
    from attnbench.experiments.finetune.adapters import add_lora, target_names, trainable_params

    cfg = ModelConfig(vocab_size=256, d_model=16, n_layer=2, n_head=2, context=32)
    for from_scratch in (False, True):
        torch.manual_seed(0)
        model = Backbone(cfg, registry.get("softmax").build_mixer).eval()
        x = torch.randint(0, 256, (2, 12))
        before = model(x).logits
        names = target_names(model, "mixer")
        assert names == [
            "blocks.0.mixer.c_attn",
            "blocks.0.mixer.c_proj",
            "blocks.1.mixer.c_attn",
            "blocks.1.mixer.c_proj",
        ]
        tuned = add_lora(model, names, 2, None, from_scratch)
        assert torch.equal(tuned(x).logits, before)  # B = 0: the adapters start as no change
        trainable = {n for n, p in tuned.named_parameters() if p.requires_grad}
        assert all("base_layer" not in n for n in trainable)  # the targeted matrices stay frozen
        if from_scratch:
            assert "blocks.0.mlp.c_fc.weight" in trainable or any("mlp" in n for n in trainable)
        else:
            assert trainable and all("lora_" in n for n in trainable)
            assert trainable_params(tuned) == 2 * 2 * (16 + 48 + 16 + 16)
    assert len(target_names(model, "linear")) > len(names)


def test_a_layer_smaller_than_the_rank_gets_its_full_rank_and_is_named(registry):
    """DeltaNet's beta projection is (n_head x d): rank 4 on 2 heads cannot be low-rank there."""
    pytest.importorskip("peft")
    import torch

    from attnbench import Backbone, ModelConfig
    from attnbench.experiments.finetune.adapters import add_lora, capped_ranks, target_names

    cfg = ModelConfig(vocab_size=256, d_model=16, n_layer=1, n_head=2, context=32)
    torch.manual_seed(0)
    model = Backbone(cfg, registry.get("deltanet").build_mixer).eval()
    names = target_names(model, "mixer")
    capped = capped_ranks(model, names, 4)
    assert capped == {"blocks.0.mixer.b_proj": 2}  # every other mixer layer is at least 4 wide
    x = torch.randint(0, 256, (2, 12))
    before = model(x).logits
    tuned = add_lora(model, names, 4, None, False)
    assert torch.equal(tuned(x).logits, before)
    shapes = {n: tuple(p.shape) for n, p in tuned.named_parameters() if "lora_A" in n}
    assert shapes["blocks.0.mixer.b_proj.lora_A.default.weight"] == (2, 16)  # rank 2, not 4
    assert shapes["blocks.0.mixer.c_attn.lora_A.default.weight"] == (4, 16)
    scale = {n: vars(m)["scaling"]["default"] for n, m in tuned.named_modules() if "scaling" in vars(m)}
    assert scale["blocks.0.mixer.b_proj"] == scale["blocks.0.mixer.c_attn"] == 2.0  # alpha / r kept


def test_a_runaway_loss_is_stored_as_diverged(tmp_path):
    pytest.importorskip("peft")
    # an update of 1e30 overflows fp32 on any CPU; a finite runaway stays bounded by the final layer norm
    suite, db = _suite(tmp_path, lora="ranks: [4], lr: 1.0e+30, lora_alpha: 4000.0"), tmp_path / "s.sqlite"
    run_cli("run", str(suite), "--store", str(db), "--variants", "softmax", env=OFFLINE)
    with Store(db) as store:
        lora = next(r for r in store.runs(suite="ft") if r["experiment"] == "lora")
    assert lora["status"] == "diverged" and "training loss" in lora["error"], lora["error"]
