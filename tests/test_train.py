"""End to end: suites train built-in and third-party variants into the store, resume
after SIGKILL, skip stored cells, and are deterministic under a seed."""

from __future__ import annotations

import math
import signal
import subprocess
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.nn.generate import generate
from attnbench.registry.loader import load_registry
from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, write_suite

SUITE = """
    version: 1
    name: e2e
    defaults:
      data: {{source: builtin, max_bytes: 200000}}
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
      train: {{batch_size: 4, seq_len: 32, lr: 1.0e-2, warmup_steps: 2,
              eval_interval: 10, eval_tokens: 2048, log_interval: 5}}
    experiments:
      - name: pair
        kind: train
        variants: [softmax, toy-ema]
        train: {{budget: {{steps: {steps}}}}}
        seeds: {seeds}
"""


def _suite(tmp_path, steps=20, seeds="[0]"):
    return write_suite(tmp_path / "suite.yaml", SUITE.format(steps=steps, seeds=seeds))


def test_suite_trains_both_and_records_provenance_then_skips(tmp_path):
    suite, store_path = _suite(tmp_path), tmp_path / "store.sqlite"
    first = run_cli("run", str(suite), "--store", str(store_path))
    assert first.returncode == 0, first.stderr
    assert "2 cells, 2 run, 0 already stored" in first.stdout
    with Store(store_path) as store:
        runs = store.runs(suite="e2e")
        assert sorted(r["variant"] for r in runs) == ["softmax", "toy-ema"]
        for r in runs:
            assert r["status"] == "done"
            prov = r["provenance"]
            assert prov["git"]["commit"] and prov["versions"]["torch"] and prov["device"].startswith("cpu")
            assert r["config"]["key_inputs"]["corpus_sha256"] == prov["corpus_sha256"]
            assert r["summary"]["val_loss"] < math.log(256) - 0.5 and r["summary"]["val_bpb"] > 0
            assert r["summary"]["n_params"] > 0 and r["summary"]["steps"] == 20
            assert (r["summary"]["optimizer"], r["summary"]["optimizer_impl"]) == ("AdamW", "fused")  # what ran
            assert r["summary"]["val_floor_unigram_loss"] > r["summary"]["val_floor_bigram_loss"] > 0  # null levels
            losses = [m["value"] for m in store.metrics(r["id"], "train/loss")]
            assert len(losses) == 4 and losses[-1] < losses[0]
        toy = next(r for r in runs if r["variant"] == "toy-ema")
        assert toy["provenance"]["variant"]["distribution"] == "attnbench-toy"
    second = run_cli("run", str(suite), "--store", str(store_path))
    assert second.returncode == 0 and "2 cells, 0 run, 2 already stored" in second.stdout


def test_sigkill_mid_suite_then_resume_has_no_duplicates_or_losses(tmp_path):
    suite = _suite(tmp_path, steps=60, seeds="[0, 1, 2]")
    store_path = tmp_path / "store.sqlite"
    proc = subprocess.Popen(
        ["attnbench", "run", str(suite), "--store", str(store_path)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        time.sleep(0.2)
        if store_path.exists():
            with Store(store_path) as store:
                if len(store.runs()) >= 2:
                    break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with Store(store_path) as store:
        done_before = len(store.runs())
    assert 2 <= done_before < 6, "the kill should land mid-suite"
    rerun = run_cli("run", str(suite), "--store", str(store_path))
    assert rerun.returncode == 0, rerun.stderr
    assert f"6 cells, {6 - done_before} run, {done_before} already stored" in rerun.stdout
    with Store(store_path) as store:
        runs = store.runs()
        assert len(runs) == 6 and len({r["cell_key"] for r in runs}) == 6
        assert all(len(store.metrics(r["id"], "train/loss")) == 12 for r in runs)


def test_same_seed_same_numbers_different_store(tmp_path):
    suite = _suite(tmp_path, steps=10)
    losses = []
    for name in ("a.sqlite", "b.sqlite"):
        assert run_cli("run", str(suite), "--store", str(tmp_path / name), "--variants", "softmax").returncode == 0
        with Store(tmp_path / name) as store:
            losses.append(store.runs()[0]["summary"]["val_loss"])
    assert losses[0] == losses[1]


def test_generation_greedy_and_sampled_through_incremental_state():
    variant = load_registry().get("softmax")
    torch.manual_seed(0)
    model = Backbone(ModelConfig(d_model=32, n_layer=2, n_head=2, context=64), variant.build_mixer).eval()
    prompt = torch.randint(0, 256, (2, 5))
    out = generate(model, prompt, 10)
    assert out.shape == (2, 15) and torch.equal(out[:, :5], prompt)
    # Greedy decoding through the cache equals argmax of the parallel forward, token by token.
    with torch.no_grad():
        for t in range(5, 15):
            assert torch.equal(model(out[:, :t]).logits[:, -1].argmax(-1), out[:, t])
    g = torch.Generator().manual_seed(1)
    sampled = generate(model, prompt, 10, temperature=1.0, top_k=3, generator=g)
    with torch.no_grad():
        for t in range(5, 15):
            top3 = model(sampled[:, :t]).logits[:, -1].topk(3).indices
            assert (top3 == sampled[:, t : t + 1]).any(-1).all()
