"""lm-eval integration: checkpoints as an lm-eval model, offline tasks, `lm_eval` suite
experiments whose rows join with their training runs, and `attnbench lm-eval`."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance

from attnbench import Backbone, ModelConfig
from attnbench.data.builtin import builtin_text
from attnbench.data.heldout import recall_training_tensors
from attnbench.data.loading import load_corpus
from attnbench.errors import CheckpointError, DocumentTooLongError, SuiteError
from attnbench.experiments.lm_eval.cell import link_lm_eval_cells
from attnbench.experiments.lm_eval.evaluate import evaluate_checkpoint, task_manager
from attnbench.experiments.lm_eval.model import AttnbenchLM
from attnbench.experiments.registry import expand_suite
from attnbench.nn.checkpoint import load_checkpoint, save_checkpoint
from attnbench.nn.generate import generate
from attnbench.plan.downstream_spec import LmEvalSpec
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import load_registry
from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, write_suite

TASKS = REPO / "suites" / "lm_eval_tasks"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _model(
    context: int = 64, d_model: int = 32, n_layer: int = 1, seed: int = 0, positions: str = "learned"
) -> Backbone:
    torch.manual_seed(seed)
    config = ModelConfig(d_model=d_model, n_layer=n_layer, n_head=2, context=context, positions=positions)
    return Backbone(config, load_registry().get("softmax").build_mixer).eval()


def _save(model: Backbone, path, variant: str = "softmax"):
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "config": model.config.to_dict(),
            "variant": variant,
            "model_kind": "backbone",
            "cell_key": "test",
            "step": 0,
        },
    )
    return path


# -- the model class ----------------------------------------------------------------------
def test_loglikelihood_is_exact_and_is_greedy_follows_argmax():
    model = _model(context=32)
    lm = AttnbenchLM.from_model(model, device="cpu", batch_size=3, truncate="left")
    prompt = torch.tensor([list(b"the cat sat")])  # (1, 11)
    greedy = bytes(generate(model, prompt, 6)[0, 11:].tolist()).decode("latin-1")
    other = chr((ord(greedy[0]) + 1) % 128) + greedy[1:]
    long_ctx = "x" * 60  # context + continuation longer than the model context: windows roll
    reqs = [Instance("loglikelihood", {}, ("the cat sat", g), 0) for g in (greedy, other)]
    reqs.append(Instance("loglikelihood", {}, ("", "ab"), 0))
    reqs.append(Instance("loglikelihood", {}, (long_ctx, "yz"), 0))
    out = lm.loglikelihood(reqs)
    assert out[0][1] is True and out[1][1] is False
    with torch.no_grad():
        seq = torch.tensor([list(b"the cat sat" + greedy.encode("latin-1"))])
        logp = F.log_softmax(model(seq[:, :-1]).logits, -1)[0]  # (T-1, V)
        direct = sum(logp[10 + i, seq[0, 11 + i]].item() for i in range(6))
        empty = F.log_softmax(model(torch.tensor([[10, ord("a")]])).logits, -1)[0]  # prefix byte "\n"
        direct_empty = empty[0, ord("a")].item() + empty[1, ord("b")].item()
        tail = torch.tensor([list((long_ctx + "yz").encode())[-33:]])  # the last window: 32 inputs
        lp_tail = F.log_softmax(model(tail[:, :-1]).logits, -1)[0]
        direct_long = lp_tail[-2, ord("y")].item() + lp_tail[-1, ord("z")].item()
    assert out[0][0] == pytest.approx(direct, abs=1e-4)
    assert out[2][0] == pytest.approx(direct_empty, abs=1e-4)
    assert out[3][0] == pytest.approx(direct_long, abs=1e-4)


def test_choices_sharing_a_context_are_scored_from_one_row():
    model = _model(context=32)
    rows: list[int] = []
    forward = model.forward
    model.forward = lambda idx, *a, **k: rows.append(idx.size(0)) or forward(idx, *a, **k)  # (B, T) per call
    lm = AttnbenchLM.from_model(model, device="cpu", batch_size=16)
    reqs = [Instance("loglikelihood", {}, ("k2 q4 d", str(d)), 0) for d in range(10)]  # one-token answers
    reqs.append(Instance("loglikelihood", {}, ("k2 q4 d", "12"), 0))  # another input: its own row
    out = lm.loglikelihood(reqs)
    assert rows == [2]
    with torch.no_grad():
        logp = F.log_softmax(forward(torch.tensor([list(b"k2 q4 d")])).logits, -1)[0, -1]  # (V,)
    for d in range(10):
        assert out[d][0] == pytest.approx(logp[ord(str(d))].item(), abs=1e-5)
        assert out[d][1] is (int(logp.argmax()) == ord(str(d)))


def test_rolling_windows_score_every_byte_once_within_the_context():
    model = _model(context=16)
    lm = AttnbenchLM.from_model(model, device="cpu", batch_size=4)
    text = "All the world's a stage, and all the men and women merely players."
    windows = lm.rolling_windows(text)
    assert all(len(toks) - 1 <= 16 for toks, _ in windows)
    assert sum(n for _, n in windows) == len(text.encode())
    scored = [t for toks, n in windows for t in toks[-n:]]
    assert scored == list(text.encode())
    short = "to be or not"
    total = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (short,), 0)])[0]
    assert isinstance(total, float)
    assert total == pytest.approx(lm.loglikelihood([Instance("loglikelihood", {}, ("", short), 0)])[0][0], abs=1e-4)


def test_generate_until_uses_incremental_decoding_and_stops():
    model = _model(context=48)
    with torch.no_grad():
        model.wte.weight[128:] = 0  # logits 0 for non-ASCII bytes: the untrained model writes ASCII
    lm = AttnbenchLM.from_model(model, device="cpu", batch_size=2, truncate="left")
    ctx = "Once upon a time"
    full = bytes(generate(model, torch.tensor([list(ctx.encode())]), 20)[0, len(ctx) :].tolist())
    cut = next(i for i in range(1, 20) if full[i] < 128 and full[i] not in full[:i])  # an ASCII stop
    truncated = bytes(generate(model, torch.tensor([[ord("x")] * 44]), 4)[0, 44:].tolist())
    outs = lm.generate_until(
        [
            Instance("generate_until", {}, (ctx, {"until": ["\x00never", chr(full[cut])], "max_gen_toks": 20}), 0),
            Instance("generate_until", {}, (ctx, {"until": [], "max_gen_toks": 9}), 0),
            Instance("generate_until", {}, ("x" * 100, {"max_gen_toks": 4}), 0),  # prompt cut to 48 - 4
        ]
    )
    assert outs[0] == full[:cut].decode("utf-8", errors="replace")
    assert outs[1] == full[:9].decode("utf-8", errors="replace")
    assert outs[2] == truncated.decode("utf-8", errors="replace")


# -- checkpoints ----------------------------------------------------------------------------
def test_checkpoint_round_trip_and_clear_errors(tmp_path):
    registry = load_registry()
    model = _model()
    good = _save(model, tmp_path / "good.pt")
    loaded, meta = load_checkpoint(good, registry)
    x = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, model(x).logits)
    assert meta.variant == "softmax" and meta.n_params == model.num_params()

    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:2000])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all" * 10)
    unknown = _save(model, tmp_path / "unknown.pt", variant="no-such-variant")
    for path, words in [
        (truncated, "truncated, corrupt"),
        (garbage, "truncated, corrupt"),
        (tmp_path / "missing.pt", "does not exist"),
        (unknown, "no-such-variant"),
    ]:
        with pytest.raises(CheckpointError, match=words) as err:
            load_checkpoint(path, registry)
        assert str(path) in str(err.value)
    with pytest.raises(CheckpointError, match="Install the plugin"):
        AttnbenchLM(checkpoint=str(unknown), device="cpu")


# -- tasks -----------------------------------------------------------------------------------
def test_local_tasks_do_not_index_builtin_tasks():
    manager = task_manager([str(TASKS)], ["attnbench_recall"], {})
    assert {"attnbench_recall", "attnbench_heldout_text"} <= set(manager.all_tasks)
    assert "hellaswag" not in manager.all_tasks and len(manager.all_tasks) < 10


def _train_recall(steps: int) -> Backbone:
    """A 2-layer softmax model trained on MQAR-style lines, loss on the answers only."""
    inputs, targets = recall_training_tensors(4000, seed=0, n_pairs=4, n_queries=4)  # (N, T)
    model = _model(context=32, n_layer=2).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = 1e-2 * min(1.0, (step + 1) / 10)
        ix = torch.randint(len(inputs), (64,), generator=gen)
        model(inputs[ix], targets[ix]).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model.eval()


def test_recall_task_ranks_trained_softmax_above_untrained_and_chance(tmp_path):
    meta = {"n_docs": 200, "n_pairs": 4, "n_queries": 4}
    acc = {}
    for name, model in (("untrained", _model(context=32, n_layer=2)), ("trained", _train_recall(300))):
        path = _save(model, tmp_path / f"{name}.pt")
        out = evaluate_checkpoint(
            str(path), ["attnbench_recall"], include_path=[str(TASKS)], metadata=meta, device="cpu", batch_size=32
        )
        res = out["results"]["attnbench_recall"]
        assert out["n-samples"]["attnbench_recall"]["effective"] == 200
        acc[name] = res["acc,none"]
    chance = 0.1  # ten digit choices
    assert abs(acc["untrained"] - chance) < 0.08, acc
    assert acc["trained"] > chance + 0.1 and acc["trained"] > acc["untrained"] + 0.1, acc


# -- suites ---------------------------------------------------------------------------------
SUITE = """
    version: 1
    name: lmeval-e2e
    defaults:
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
      variants: [softmax]
    experiments:
      - name: tiny
        kind: train
        data: {{source: text, path: {train}, val_path: heldout_harness.txt, max_bytes: 200000}}
        train: {{budget: {{steps: {steps}}}, batch_size: 8, seq_len: 64, lr: 1.0e-2, warmup_steps: 2,
                eval_interval: 1000, eval_tokens: 4096}}
      - name: text
        kind: lm_eval
        seeds: {text_seeds}
        lm_eval: {{from_experiment: tiny, tasks: [attnbench_heldout_text], include_path: {tasks},
                  paths: {{text_path: heldout_lm.txt}}, batch_size: 16}}
      - name: hub
        kind: lm_eval
        lm_eval: {{from_experiment: tiny, tasks: [attnbench_test_hub], include_path: hub_tasks}}
"""
HUB_TASK = """
task: attnbench_test_hub
dataset_path: EleutherAI/wikitext_document_level
dataset_name: wikitext-2-raw-v1
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: page
"""


def _suite(tmp_path, steps: int = 30, text_seeds: str = "[0]"):
    """Held-out text of 40 windows of 64 bytes. The harness scores byte t+1 given bytes <= t
    in windows of 64 and never scores its first byte; lm-eval scores every byte of its
    document, the first given the prefix byte. So the harness file is the prefix byte
    ("\\n") followed by the document lm-eval reads: both score the same 2560 bytes in the same
    windows (lm-eval's rolling windows with context 64), and bits per byte agree exactly up
    to float summation order."""
    text = builtin_text("tinyshakespeare")[-20000:]  # held out: the corpus's tail
    body = text.encode("ascii", "ignore")[: 40 * 64].decode("ascii")
    (tmp_path / "heldout_lm.txt").write_text(body)
    (tmp_path / "heldout_harness.txt").write_text("\n" + body)
    (tmp_path / "hub_tasks").mkdir(exist_ok=True)
    (tmp_path / "hub_tasks" / "hub.yaml").write_text(HUB_TASK)
    train = tmp_path / "train.txt"
    train.write_text(builtin_text("tinyshakespeare")[:300000])
    return write_suite(
        tmp_path / "suite.yaml", SUITE.format(train=train, tasks=TASKS, steps=steps, text_seeds=text_seeds)
    )


def test_lm_eval_cells_are_keyed_by_their_trained_cells(tmp_path):
    registry = load_registry()

    def cells(steps):
        suite = load_suite(_suite(tmp_path, steps))
        out = expand_suite(suite, registry, device="cpu", corpus_hash=lambda s: load_corpus(s, registry).sha256)
        return link_lm_eval_cells(suite, out)  # idempotent: expand may have linked them already

    first = cells(30)
    train = [c for c in first if c.kind == "train"]
    lm = [c for c in first if c.kind == "lm_eval"]
    assert [c.kind for c in first] == ["train", "lm_eval", "lm_eval"] and len(train) == 1
    for c in lm:
        assert c.key_inputs["train_cell_key"] == train[0].key and c.model == train[0].model
        include = c.spec_as(LmEvalSpec).include_path
        assert isinstance(include, list) and all(p.startswith("/") for p in include)
    assert lm[0].spec_as(LmEvalSpec).paths["text_path"] == str(tmp_path / "heldout_lm.txt")
    second = cells(31)  # a different training budget: new trained cell, so new lm_eval keys
    assert {c.key for c in second if c.kind == "lm_eval"}.isdisjoint(c.key for c in lm)
    mismatched = load_suite(_suite(tmp_path, 30, text_seeds="[5]"))
    with pytest.raises(SuiteError, match="no trained cell of variant 'softmax'.*seed 5"):
        link_lm_eval_cells(mismatched, expand_suite(mismatched, registry))


def test_shipped_suite_validates():
    result = run_cli("validate", "suites/lm-eval.yaml")
    assert result.returncode == 0, result.stderr


def test_suite_bpb_matches_harness_and_rows_join_their_training_run(tmp_path):
    suite, store_path = _suite(tmp_path), tmp_path / "store.sqlite"
    first = run_cli("run", str(suite), "--store", str(store_path), env=OFFLINE)
    assert first.returncode == 1, first.stderr  # the hub task cannot load offline
    assert "3 cells, 3 run, 0 already stored" in first.stdout
    with Store(store_path) as store:
        runs = {r["experiment"]: r for r in store.runs(suite="lmeval-e2e")}
        train, text, hub = runs["tiny"], runs["text"], runs["hub"]
        assert train["status"] == "done" and text["status"] == "done", text["error"]
        assert hub["status"] == "failed" and "offline: true" in hub["error"] and "attnbench_test_hub" in hub["error"]
        assert text["config"]["key_inputs"]["train_cell_key"] == train["cell_key"]
        rows = {r["name"]: r for r in store.results(text["id"])}
        assert set(rows) == {"word_perplexity", "byte_perplexity", "bits_per_byte"}
        by_key = {r["cell_key"]: r for r in store.runs()}
        for r in rows.values():  # every row joins with its training run
            tags = r["tags"]
            assert by_key[tags["train_cell_key"]]["id"] == tags["train_run_id"] == train["id"]
            assert tags["task"] == "attnbench_heldout_text" and tags["metric"] == r["name"]
            assert tags["version"] == 1.0 and tags["n_samples"] == 1 and "stderr" in tags
        lm_bpb, harness_bpb = rows["bits_per_byte"]["value"], train["summary"]["val_bpb"]
        assert math.isfinite(lm_bpb) and 1.0 < harness_bpb < 8.0
        assert abs(lm_bpb - harness_bpb) / harness_bpb < 1e-4  # the issue asks for 1%
        assert rows["byte_perplexity"]["value"] == pytest.approx(2**lm_bpb, rel=1e-9)
    again = run_cli("run", str(suite), "--store", str(store_path), env=OFFLINE)
    assert "3 cells, 1 run, 2 already stored" in again.stdout  # only the failed hub cell is tried again
    kept = run_cli("run", str(suite), "--store", str(store_path), "--no-retry-failed", env=OFFLINE)
    assert "3 cells, 0 run, 3 already stored" in kept.stdout


# -- command line -------------------------------------------------------------------------
def test_attnbench_lm_eval_forwards_to_lm_eval_cli(tmp_path):
    ckpt = _save(_model(context=32, n_layer=2), tmp_path / "model.pt")
    out_dir = tmp_path / "out"
    result = run_cli(
        "lm-eval",
        "--model",
        "attnbench",
        "--model_args",
        f"checkpoint={ckpt}",
        "--batch_size",
        "8",
        "--tasks",
        "attnbench_recall",
        "--include_path",
        str(TASKS),
        "--metadata",
        json.dumps({"n_docs": 20, "n_pairs": 4, "n_queries": 4}),
        "--output_path",
        str(out_dir),
        env=OFFLINE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "attnbench_recall" in result.stdout and "acc" in result.stdout  # lm-eval's table
    assert "requested but CUDA is not available" not in result.stderr  # no --device given: none requested
    files = list(out_dir.rglob("results_*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    assert saved["config"]["model"] == "attnbench"
    assert saved["config"]["attnbench"]["variant"] == "softmax"
    assert saved["n-samples"]["attnbench_recall"]["effective"] == 20
    assert 0.0 <= saved["results"]["attnbench_recall"]["acc,none"] <= 1.0


# -- documents longer than the checkpoint reads ------------------------------------------------
LONG_RECALL = {"n_docs": 10, "n_pairs": 20, "n_queries": 4}  # documents of ~70 bytes


def test_a_document_longer_than_the_context_is_refused_naming_task_lengths_and_fix(tmp_path):
    ckpt = _save(_model(context=25), tmp_path / "model.pt")
    with pytest.raises(DocumentTooLongError) as err:
        evaluate_checkpoint(str(ckpt), ["attnbench_recall"], include_path=[str(TASKS)], metadata=LONG_RECALL)
    msg = str(err.value)
    assert msg.startswith("task attnbench_recall: 10 of 10 documents are longer than this checkpoint reads"), msg
    assert "it reads 25" in msg and "model context: " in msg and "positions: none" in msg, msg
    assert "truncate=left" in msg and "lm_eval: {truncate: left}" in msg, msg


def test_truncate_left_scores_documents_on_their_tail_and_counts_them():
    docs = ["k" * 40, "q" * 10, "z" * 60]  # two of three longer than the 25 positions the model has
    reqs = [Instance("loglikelihood", {}, (d, "ab"), i, ("attnbench_recall", i, 1)) for i, d in enumerate(docs)]
    cut = AttnbenchLM.from_model(_model(context=25), device="cpu", truncate="left")
    scores = cut.loglikelihood(reqs)
    assert cut.get_model_info()["attnbench"]["truncated"] == {
        "attnbench_recall": "2 of 3 documents truncated to their last 25 tokens"
    }
    with torch.no_grad():
        tail = torch.tensor([list((docs[0] + "ab").encode())[-26:]])  # (1, 26): the last 25 inputs
        lp = F.log_softmax(cut.model(tail[:, :-1]).logits, -1)[0]  # (25, V)
    assert scores[0][0] == pytest.approx(lp[-2, ord("a")].item() + lp[-1, ord("b")].item(), abs=1e-4)
    whole = AttnbenchLM.from_model(_model(context=25, positions="none"), device="cpu")  # no positions: any length
    scores = whole.loglikelihood(reqs)
    assert "truncated" not in whole.get_model_info()["attnbench"]
    with torch.no_grad():
        seq = torch.tensor([list((docs[2] + "ab").encode())])  # (1, 62) read whole
        lp = F.log_softmax(whole.model(seq[:, :-1]).logits, -1)[0]  # (61, V)
    assert scores[2][0] == pytest.approx(lp[-2, ord("a")].item() + lp[-1, ord("b")].item(), abs=1e-4)
