"""Fair budgets, resume inside a run, corrupt training states, divergence, tasks, BPE."""

from __future__ import annotations

import io
import math
import signal
import subprocess
import time

import pytest

import attnbench.experiments.train.loop as loop
from attnbench.data.loading import load_corpus
from attnbench.experiments.registry import expand_suite
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, write_suite

BASE = """
    version: 1
    name: budgets
    defaults:
      data: {data}
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
      train: {{batch_size: 2, seq_len: 32, lr: 3.0e-3, warmup_steps: 2, eval_interval: 1000, eval_tokens: 1024,
              log_interval: 5, checkpoint: false}}
    experiments:
      - name: e
        kind: train
        variants: {variants}
        train: {train}
"""
TEXT = "{source: stdlib, max_bytes: 200000}"


def _run(tmp_path, train: str, variants: str = "[softmax, toy-ema]", data: str = TEXT, name: str = "s.yaml"):
    path = write_suite(tmp_path / name, BASE.format(data=data, variants=variants, train=train))
    suite = load_suite(path)
    with Store(tmp_path / f"{name}.sqlite") as store:
        report = run_suite(suite, store, load_registry(), device="cpu", out=io.StringIO())
        return report, store.runs(), store


class _StepClock:
    """The train loop's clock, moved only by training steps: a step of each variant takes
    STEP_S[variant] seconds, whatever else the machine is doing."""

    STEP_S = {"softmax": 0.013, "toy-ema": 0.021}

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def stepping(self, train_step):
        def step(*args):
            self.now += self.STEP_S[args[4].variant]  # (fwd, model, opt, stream, cell, ...)
            return train_step(*args)

        return step


def test_seconds_budget_gives_equal_wall_clock(tmp_path, monkeypatch):
    clock = _StepClock()
    monkeypatch.setattr(loop, "time", clock)
    monkeypatch.setattr(loop, "_train_step", clock.stepping(loop._train_step))
    report, runs, _ = _run(tmp_path, "{budget: {seconds: 0.5}}")
    assert report.not_done == [] and len(runs) == 2
    for r in runs:  # stopped where the next step would overshoot more than stopping undershoots
        step_s = _StepClock.STEP_S[r["variant"]]
        assert abs(r["summary"]["train_time_s"] - 0.5) <= step_s / 2, (r["variant"], r["summary"]["train_time_s"])
        assert r["summary"]["steps"] == round(0.5 / step_s)
    assert runs[0]["summary"]["steps"] != runs[1]["summary"]["steps"]  # the budget, not the steps, is equal


def test_flops_budget_gives_each_variant_its_step_count(tmp_path):
    report, runs, _ = _run(tmp_path, "{budget: {flops: 2.0e9}}")
    assert report.not_done == []
    for r in runs:
        s = r["summary"]
        expected = math.floor(2.0e9 / (s["train_flops_per_token"] * 2 * 32))
        assert s["steps"] == expected and s["train_flops"] <= 2.0e9
    assert len({r["summary"]["steps"] for r in runs}) == 2


def _kill_when_state_exists(suite, store_path, timeout=300):
    proc = subprocess.Popen(
        ["attnbench", "run", str(suite), "--store", str(store_path)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + timeout
    states = []
    while time.time() < deadline and not states:
        time.sleep(0.05)
        states = list((store_path.parent / "checkpoints").glob("*.state.pt"))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert states, "no training state was written before the timeout"
    return states[0]


RESUME = """
    version: 1
    name: resume
    defaults:
      data: {source: stdlib, max_bytes: 200000}
      model: {d_model: 32, n_layer: 1, n_head: 2, dropout: 0.1}
    experiments:
      - name: e
        kind: train
        variants: [softmax]
        train: {budget: {steps: 80}, batch_size: 4, seq_len: 32, lr: 3.0e-3, eval_interval: 40,
                eval_tokens: 2048, checkpoint_interval: 25, log_interval: 5}
"""


def test_killed_run_resumes_to_the_same_final_loss(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    suite = write_suite(tmp_path / "resume.yaml", RESUME)
    assert run_cli("run", str(suite), "--store", str(tmp_path / "a" / "s.sqlite")).returncode == 0
    _kill_when_state_exists(suite, tmp_path / "b" / "s.sqlite")
    resumed = run_cli("run", str(suite), "--store", str(tmp_path / "b" / "s.sqlite"))
    assert resumed.returncode == 0, resumed.stderr
    with Store(tmp_path / "a" / "s.sqlite") as a, Store(tmp_path / "b" / "s.sqlite") as b:
        full, again = a.runs()[0], b.runs()[0]
        assert again["summary"]["resumed_from_step"] in (25, 50, 75)
        assert abs(full["summary"]["val_loss"] - again["summary"]["val_loss"]) <= 1e-6
        assert [m["value"] for m in a.metrics(full["id"], "train/loss")] == pytest.approx(
            [m["value"] for m in b.metrics(again["id"], "train/loss")], abs=1e-6
        )


def test_corrupt_training_state_is_reported_and_the_run_restarts(tmp_path):
    suite = write_suite(tmp_path / "resume.yaml", RESUME)
    store_path = tmp_path / "s.sqlite"
    state = _kill_when_state_exists(suite, store_path)
    state.write_bytes(b"\x00not a checkpoint")
    rerun = run_cli("run", str(suite), "--store", str(store_path))
    assert rerun.returncode == 0
    assert "unreadable" in rerun.stderr and "restarted from step 0" in rerun.stderr
    with Store(store_path) as store:
        [run] = store.runs()
        assert run["status"] == "done" and run["summary"]["resumed_from_step"] is None
        assert "unreadable" in run["summary"]["resume_error"]


def test_divergence_is_recorded_and_the_suite_goes_on(tmp_path):
    report, runs, _ = _run(
        tmp_path,
        "{budget: {steps: 60}, grid: {lr: [200.0]}}".replace(", grid: {lr: [200.0]}", ", lr: 200.0, grad_clip: 1.0e6"),
    )
    by = {r["variant"]: r for r in runs}
    assert len(runs) == 2
    diverged = [r for r in runs if r["status"] == "diverged"]
    assert diverged, [r["summary"].get("val_loss") for r in runs]
    for r in diverged:
        assert "at step" in r["error"] and r["summary"]["diverged_at_step"] > 0
    assert any("diverged" in line for line in report.not_done)
    assert set(by) == {"softmax", "toy-ema"}


def test_task_training_reports_accuracy_tagged_with_difficulty(tmp_path):
    data = (
        "{source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 32, num_kv_pairs: 2}, "
        "train_examples: 500, val_examples: 64, eval_settings: [{num_kv_pairs: 2}, {num_kv_pairs: 4}]}"
    )
    report, runs, _ = _run(tmp_path, "{budget: {steps: 10}}", variants="[softmax]", data=data)
    assert report.not_done == []
    [run] = runs
    with Store(tmp_path / "s.yaml.sqlite") as store:
        acc = [r for r in store.results(run["id"]) if r["name"] == "accuracy"]
    assert sorted(r["tags"]["num_kv_pairs"] for r in acc) == [2, 4]
    assert all(r["tags"]["task"] == "mqar" and 0.0 <= r["value"] <= 1.0 for r in acc)
    assert run["config"]["model"]["vocab_size"] == 64


def test_task_seq_len_mismatch_is_a_suite_error(tmp_path):
    from attnbench.errors import SuiteError

    data = "{source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 48, num_kv_pairs: 2}}"
    path = write_suite(tmp_path / "s.yaml", BASE.format(data=data, variants="[softmax]", train="{budget: {steps: 1}}"))
    with pytest.raises(SuiteError, match="set train.seq_len: 48"):
        expand_suite(load_suite(path), load_registry())


def test_bpe_tokenizer_trains_locally_and_reports_bits_per_byte(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    data = "{source: builtin, tokenizer: bpe, bpe_vocab_size: 400, max_bytes: 300000}"
    path = write_suite(tmp_path / "s.yaml", BASE.format(data=data, variants="[softmax]", train="{budget: {steps: 10}}"))
    suite = load_suite(path)
    [cell] = expand_suite(suite, load_registry(), corpus_hash=lambda s: load_corpus(s).sha256)
    corpus = load_corpus(cell.data_spec())
    assert cell.model.vocab_size == 400 == corpus.vocab_size
    assert corpus.bytes_per_token is not None and 1.5 < corpus.bytes_per_token < 4.0
    assert list((tmp_path / "cache" / "tokenizers").glob("bpe-400-*.json"))  # cached by corpus hash
    with Store(tmp_path / "s.sqlite") as store:
        run_suite(suite, store, load_registry(), device="cpu", out=io.StringIO())
        s = store.runs()[0]["summary"]
    assert s["val_bpb"] == pytest.approx(s["val_loss"] / math.log(2) / corpus.bytes_per_token)
