"""Issue 57 items 5, 6, 7 and 10: a refused run creates nothing; `lm_eval: {model: hf}` is
refused up front without the hf extra; `protocol.learn_target: true` is refused; messages that
sent a user the wrong way now point the right way."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from attnbench.errors import SuiteError
from attnbench.plan import bounded_yaml
from attnbench.plan.requirements import experiment_needs, missing_packages
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import load_suite
from tests.helpers import tiny_train_suite, write_suite

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "ATTNBENCH_PLUGINS": "softmax"}


def _listing(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _cli(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["attnbench", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **OFFLINE}, timeout=300
    )


# -- item 5: a refused run creates nothing ---------------------------------------------------
def test_a_run_refused_for_a_bad_suite_leaves_the_working_directory_unchanged(tmp_path):
    bad = tiny_train_suite("bad").replace("variants: [softmax]", "variants: [softmaks]")
    write_suite(tmp_path / "bad.yaml", bad)
    before = _listing(tmp_path)
    refused = _cli(tmp_path, "run", "bad.yaml", "--device", "cpu", "--track", "tensorboard")
    assert refused.returncode == 2, refused.stderr
    assert "unknown variant 'softmaks'" in refused.stderr
    assert _listing(tmp_path) == before  # no results/, no results/attnbench.sqlite, no tracking/


def test_a_run_refused_for_an_unknown_tracker_creates_no_store(tmp_path):
    write_suite(tmp_path / "ok.yaml", tiny_train_suite("ok"))
    before = _listing(tmp_path)
    refused = _cli(tmp_path, "run", "ok.yaml", "--device", "cpu", "--store", "deep/er/s.sqlite", "--track", "nope")
    assert refused.returncode == 2 and "unknown tracker 'nope'" in refused.stderr, refused.stderr
    assert _listing(tmp_path) == before


def test_a_tracker_that_cannot_start_leaves_no_store_and_no_tracking_folder(tmp_path, monkeypatch):
    from attnbench.cli import main
    from attnbench.track import builtin

    monkeypatch.chdir(tmp_path)
    write_suite(tmp_path / "ok.yaml", tiny_train_suite("ok"))
    before = _listing(tmp_path)

    def broken(out_dir, suite):
        (out_dir / "half-written").write_text("x")
        raise builtin.TrackerError("the tracker's service did not start")

    def register(register):
        register(builtin.TrackerSpec("broken", broken))

    monkeypatch.setattr(builtin, "attnbench_register_trackers", builtin.hookimpl(register))
    assert main(["run", "ok.yaml", "--device", "cpu", "--track", "broken", "--no-report"]) == 2
    assert _listing(tmp_path) == before


# -- item 6: lm_eval model hf needs the hf extra -----------------------------------------------
LM_EVAL_HF = """
version: 1
name: hf-eval
defaults:
  variants: [softmax]
  data: {source: builtin, max_bytes: 50000}
  model: {d_model: 16, n_layer: 1, n_head: 2}
experiments:
  - name: text
    kind: train
    train: {batch_size: 2, seq_len: 16, budget: {steps: 2}, eval_interval: 2, eval_tokens: 64}
  - name: downstream
    kind: lm_eval
    lm_eval: {tasks: [attnbench_recall], from_experiment: text, model: hf}
"""

HF_MODULES = ("transformers", "safetensors", "accelerate", "tokenizers")


@pytest.fixture
def without_hf(monkeypatch):
    """The README's main install: none of the hf extra's packages importable."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] in HF_MODULES else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_lm_eval_model_hf_needs_the_hf_extra(tmp_path):
    suite = load_suite(write_suite(tmp_path / "s.yaml", LM_EVAL_HF))
    needs = experiment_needs(suite.experiments[1])
    assert {n.module for n in needs} == set(HF_MODULES) and {n.extra for n in needs} == {"hf"}
    assert experiment_needs(suite.experiments[0]) == []
    plain = load_suite(write_suite(tmp_path / "p.yaml", LM_EVAL_HF.replace(", model: hf", "")))
    assert experiment_needs(plain.experiments[1]) == []  # the attnbench model needs no extra


def test_lm_eval_model_hf_is_refused_up_front_on_the_main_install(tmp_path, monkeypatch, capsys, without_hf):
    from attnbench.cli import main

    monkeypatch.chdir(tmp_path)
    write_suite(tmp_path / "s.yaml", LM_EVAL_HF)
    assert [n.module for n in missing_packages(load_suite("s.yaml"))] == list(HF_MODULES)
    assert main(["validate", "s.yaml"]) == 0
    warned = capsys.readouterr().err
    assert "pip install 'attnbench[hf]'" in warned
    before = _listing(tmp_path)
    assert main(["run", "s.yaml", "--device", "cpu"]) == 2
    out = capsys.readouterr()
    assert "experiment 'downstream': lm_eval model: hf" in out.err and "pip install 'attnbench[hf]'" in out.err
    assert "'transformers', 'safetensors', 'accelerate', 'tokenizers'" in out.err
    assert "checking softmax" not in out.err + out.out  # nothing trained, not even the gate ran
    assert _listing(tmp_path) == before


# -- item 7: learn_target is a number -------------------------------------------------------------
PROTOCOL = """
version: 1
name: p
experiments:
  - name: t
    kind: train
    variants: [softmax]
    data: {{source: builtin, max_bytes: 50000, test_fraction: 0.1}}
    models: [{{d_model: 16, n_layer: 1, n_head: 2}}]
    train: {{batch_size: 2, seq_len: 16, budget: {{steps: 2}}, eval_interval: 2, eval_tokens: 64}}
    seeds: [0, 1]
    protocol: {{tune: false, {protocol}}}
"""


@pytest.mark.parametrize("key", ["learn_target", "margin"])
@pytest.mark.parametrize("value", ["true", "false"])
def test_learn_target_true_is_refused_not_read_as_one(tmp_path, value, key):
    path = write_suite(tmp_path / "s.yaml", PROTOCOL.format(protocol=f"{key}: {value}"))
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert f"protocol.{key} is a number" in str(err.value) and f"not {value}" in str(err.value)


def test_learn_target_numbers_are_still_taken(tmp_path):
    for value, want in (("2", 2.0), ("1.5", 1.5)):
        path = write_suite(tmp_path / "s.yaml", PROTOCOL.format(protocol=f"learn_target: {value}"))
        experiment = load_suite(path).experiments[0]
        assert isinstance(experiment, TrainExperiment) and experiment.protocol is not None
        assert experiment.protocol.learn_target == want


# -- item 10: messages ----------------------------------------------------------------------------
def test_a_list_in_protocol_seeds_points_to_the_experiments_seeds(tmp_path):
    path = write_suite(tmp_path / "s.yaml", PROTOCOL.format(protocol="seeds: [0, 1, 2]"))
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    text = str(err.value)
    assert "s.yaml:11" in text and "protocol.seeds takes seeds until decided as a mapping" in text
    assert "belongs in the experiment's own seeds:" in text and "seeds: [0, 1, 2]" in text
    assert "valid dictionary or instance of SeedRounds" not in text


def test_model_singular_in_an_experiment_points_to_models(tmp_path):
    path = write_suite(
        tmp_path / "s.yaml",
        tiny_train_suite("m")
        .replace("models: [{d_model: 16", "model: {d_model: 16")
        .replace("n_head: 2}]", "n_head: 2}"),
    )
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    text = str(err.value)
    assert "experiments[0].model" in text and "under models: (a list" in text and "belongs under defaults:" in text


def test_many_plain_values_are_not_called_an_alias_bomb():
    text = "seeds: [" + ", ".join(map(str, range(100_001))) + "]\n"
    with pytest.raises(bounded_yaml.LimitError) as err:
        bounded_yaml.load(text)
    message = str(err.value)
    assert "no alias involved" in message and "more than 100,000 values" in message
    assert "billion laughs" not in message and "alias stands for" not in message
    bomb = "a: &a [" + ", ".join(["x"] * 400) + "]\nb: [" + ", ".join(["*a"] * 300) + "]\n"
    with pytest.raises(bounded_yaml.LimitError, match="billion laughs"):
        bounded_yaml.load(bomb)


def test_a_suite_listing_100000_seeds_gets_the_plain_message(tmp_path):
    seeds = "[" + ", ".join(map(str, range(100_001))) + "]"
    path = write_suite(tmp_path / "s.yaml", tiny_train_suite("many") + f"    seeds: {seeds}\n")
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert "no alias involved" in str(err.value) and "billion" not in str(err.value)


def test_an_experiment_named_with_a_dot_is_addressed_by_set(tmp_path):
    path = write_suite(tmp_path / "s.yaml", tiny_train_suite("dots").replace("name: t", "name: v1.2"))
    suite = load_suite(path, ["experiments.v1.2.seeds=[0, 1, 2]"])
    assert suite.experiments[0].seeds == [0, 1, 2]
    with pytest.raises(SuiteError) as err:
        load_suite(path, ["experiments.v1.3.seeds=[1]"])
    assert "no experiment named 'v1' or 'v1.3'; did you mean 'v1.2'? (e.g. experiments.v1.2.seeds=...)" in str(
        err.value
    )
    with pytest.raises(SuiteError, match="address a setting of experiment 'v1.2'"):
        load_suite(path, ["experiments.v1.2=3"])
    with pytest.raises(SuiteError) as err:  # an error in the override's value names the override
        load_suite(path, ["experiments.v1.2.seeds=[x]"])
    assert "--set experiments.v1.2.seeds=[x]" in str(err.value)
