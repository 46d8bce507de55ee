"""Long context: the needle tasks (S-NIAH family) through the task hook, their lm-eval
YAMLs offline, and train.eval_lengths end to end through the CLI (a length a model cannot
run is recorded, not crashed), with its report section."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from attnbench import IGNORE, load_registry
from attnbench.cli import main
from attnbench.experiments.lm_eval.evaluate import task_manager
from attnbench.report.longcontext import wilson
from attnbench.store.database import Store
from tests.helpers import REPO, write_suite

NEEDLE_PREFIX = {"niah_passkey": "The pass key of ", "niah_number": "The number of ", "niah_uuid": "The code of "}


def _text(row: torch.Tensor) -> str:
    return bytes(row.tolist()).decode("ascii")


@pytest.mark.parametrize("name", sorted(NEEDLE_PREFIX))
def test_needle_tasks_are_reproducible_and_score_the_answer_only(name):
    task = load_registry().get_task(name)
    options = task.make_options({"seq_len": 96, "depth": 0.5})
    a, b, c = task.generate(options, 6, 3), task.generate(options, 6, 3), task.generate(options, 6, 4)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)
    assert a.inputs.shape == (6, 96) and int(a.inputs.max()) < 256
    prefix = NEEDLE_PREFIX[name]
    for x, y in zip(a.inputs, a.targets, strict=True):
        scored = (y != IGNORE).nonzero().flatten().tolist()
        answer = bytes(y[y != IGNORE].tolist()).decode("ascii")
        assert scored == list(range(96 - len(answer), 96))  # the value's bytes, at the end, and nothing else
        text = _text(x)
        key = text[text.rindex(prefix) + len(prefix) :][:3]
        assert f"{prefix}{key} is {answer}. " in text  # the needle holds the value asked for
        assert text.endswith(f"{prefix}{key} is {answer[:-1]}")  # the question, then the answer being read


@pytest.mark.parametrize("depth", [0.0, 0.3, 1.0])
def test_needle_sits_at_the_requested_depth(depth):
    task = load_registry().get_task("niah_passkey")
    options = task.make_options({"seq_len": 200, "depth": depth})
    needle, question, answer = len("The pass key of abc is 12345. "), len("The pass key of abc is "), 5
    haystack = 201 - needle - question - answer
    for row in task.generate(options, 4, 0).inputs:
        assert _text(row).index("The pass key of ") == round(depth * haystack)


def test_multi_key_needles_have_distinct_keys_and_one_is_asked():
    task = load_registry().get_task("niah_uuid")
    batch = task.generate(task.make_options({"seq_len": 200, "depth": [0.0, 1.0], "n_keys": 3}), 5, 0)
    for x, y in zip(batch.inputs, batch.targets, strict=True):
        text, answer = _text(x), bytes(y[y != IGNORE].tolist()).decode("ascii")
        keys = [text[i + len("The code of ") :][:3] for i in range(len(text)) if text.startswith("The code of ", i)]
        assert len(keys) == 4 and len(set(keys[:3])) == 3 and keys[3] in keys[:3]  # 3 needles, then the question
        assert f"The code of {keys[3]} is {answer}" in text and len(answer) == 9  # 8 hex digits and a dash


def test_impossible_layouts_and_bad_options_are_refused():
    task = load_registry().get_task("niah_number")
    cases = {
        "take 58 bytes and seq_len is 40: set seq_len >= 57": {"seq_len": 40},
        "lower n_keys": {"seq_len": 64, "n_keys": 4},
        "depth must be a number in [0, 1]": {"depth": 1.5},
        "haystack must be one of": {"haystack": "web"},
    }
    for words, raw in cases.items():
        with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
            task.make_options(raw)


def test_needle_lm_eval_tasks_load_offline():
    from lm_eval.tasks import get_task_dict

    names = ["attnbench_niah_passkey", "attnbench_niah_number", "attnbench_niah_uuid"]
    manager = task_manager([str(REPO / "suites" / "lm_eval_tasks")], names, {"n_docs": 4, "seq_len": 120})
    tasks = get_task_dict(list[Any](names), manager)
    assert set(tasks) == set(names)
    for task in tasks.values():
        docs = list(task.test_docs())
        assert len(docs) == 4 and all(len(d["context"]) + len(d["answer"]) == 121 for d in docs)
        assert task.doc_to_target(docs[0]) == docs[0]["answer"] and docs[0]["context"].endswith(" is ")


def test_wilson_interval():
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson(0, 16)[0] == 0.0 and 0.15 < wilson(0, 16)[1] < 0.25
    assert all(math.isnan(b) for b in wilson(0, 0))  # no trials, no interval


SUITE = """
version: 1
name: lengths
defaults:
  model: {d_model: 16, n_layer: 1, n_head: 2}
  train: {batch_size: 4, seq_len: 16, eval_interval: 4, eval_tokens: 128, checkpoint: false,
          budget: {steps: 4}, eval_lengths: [16, 32, 64]}
experiments:
  - name: text
    kind: train
    variants: [softmax, future]
    models: [{positions: none}, {positions: learned}]
    data: {source: builtin, max_bytes: 20000}
  - name: needle
    kind: train
    variants: [softmax]
    models: [{positions: none}]
    data: {source: task, task: niah_passkey, task_options: {seq_len: 64, depth: [0.0, 1.0]}, train_examples: 32,
           val_examples: 8, eval_settings: [{depth: 0.0}, {depth: 1.0}]}
    train: {seq_len: 64, eval_lengths: [64, 128]}
"""


def _runs(store) -> dict[tuple[str, str, str], dict]:
    with Store(store) as opened:
        runs = opened.runs()
        out = {}
        for r in runs:
            positions = r["config"]["model"].get("positions", "learned")
            out[(r["experiment"], r["variant"], positions)] = {**r, "results": opened.results(r["id"])}
    return out


def test_eval_lengths_end_to_end(tmp_path, capsys):
    suite, store = write_suite(tmp_path / "lengths.yaml", SUITE), tmp_path / "store.sqlite"
    assert main(["run", str(suite), "--store", str(store)]) == 0
    runs = _runs(store)
    status = {k: r["summary"]["eval_lengths"] for k, r in runs.items()}
    assert status[("text", "softmax", "none")] == {"16": "ok", "32": "ok", "64": "ok"}
    learned = status[("text", "softmax", "learned")]
    assert learned["16"] == "ok" and learned["64"].startswith("cannot extend: learned absolute positions cover 16")
    assert status[("text", "future", "none")]["32"].startswith("cannot extend: future attention")
    nope = runs[("text", "softmax", "none")]["results"]
    buckets = sorted((r["tags"]["pos_start"], r["tags"]["pos_end"]) for r in nope if r["name"] == "position_loss")
    assert buckets[-1] == (60, 64) and len(buckets) == 4 + 8 + 16  # buckets of T/4 at 16, 32 and 64
    needle = runs[("needle", "softmax", "none")]["results"]
    exact = [r for r in needle if r["name"] == "length_exact"]
    assert sorted((r["tags"]["eval_length"], r["tags"]["depth"]) for r in exact) == [
        (64, 0.0),
        (64, 1.0),
        (128, 0.0),
        (128, 1.0),
    ]
    assert all(r["tags"]["n"] == 8 and 0 <= r["value"] <= 1 for r in exact)
    report = (tmp_path / "reports" / "lengths" / "report.md").read_text()
    assert "## Long context: text" in report and "cannot extend: learned absolute positions" in report
    assert "needle: retrieval by length and needle depth" in report


def test_eval_lengths_are_validated_at_load(tmp_path, capsys):
    for bad, words in {"[16, 1]": "integers >= 2", "[]": "eval_lengths is empty", "[16, 16]": "a length twice"}.items():
        body = SUITE.replace("eval_lengths: [16, 32, 64]", f"eval_lengths: {bad}")
        assert main(["validate", str(write_suite(tmp_path / "bad.yaml", body))]) == 2
        err = capsys.readouterr().err
        assert words in err and "eval_lengths" in err and "Traceback" not in err
