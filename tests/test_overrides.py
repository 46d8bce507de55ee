"""`--set KEY=VALUE` overrides: applied like the file, errors name the override, recorded."""

from __future__ import annotations

import json
import sqlite3

import pytest

from attnbench.errors import SuiteError
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import load_suite
from tests.helpers import run_cli, write_suite

SUITE = """
version: 1
name: ov
defaults:
  model: {d_model: 32, n_layer: 1, n_head: 2}
  train: {batch_size: 4, seq_len: 32, lr: 3.0e-3, warmup_steps: 2, eval_interval: 5, eval_tokens: 512,
          log_interval: 5, checkpoint_interval: 0, checkpoint: false}
experiments:
  - name: text
    kind: train
    variants: [softmax]
    data: {source: builtin, max_bytes: 20000}
    train: {budget: {steps: 5}}
  - name: other
    kind: train
    variants: [softmax]
    data: {source: builtin, max_bytes: 20000}
    train: {budget: {steps: 5}, lr: 1.0e-2}
"""


def test_overrides_set_defaults_and_one_experiment_by_name(tmp_path):
    path = write_suite(tmp_path / "s.yaml", SUITE)
    suite = load_suite(path, ["defaults.train.lr=1e-3", "experiments.text.seeds=[0,1]", "defaults.model.d_model=64"])
    text, other = suite.experiments
    assert isinstance(text, TrainExperiment) and isinstance(other, TrainExperiment)
    assert text.train.lr == other.train.lr == 1e-3  # a command-line default beats the file's own value
    assert text.seeds == [0, 1] and other.seeds == [0]
    assert text.models[0].d_model == other.models[0].d_model == 64
    assert suite.overrides == ("defaults.train.lr=1e-3", "experiments.text.seeds=[0,1]", "defaults.model.d_model=64")
    unchanged = load_suite(path).experiments[1]
    assert isinstance(unchanged, TrainExperiment) and unchanged.train.lr == 1e-2  # the file itself is untouched


@pytest.mark.parametrize(
    "override, expected",
    [
        ("defaults.train.lr=-1", "--set defaults.train.lr=-1: experiments[0].train.lr"),
        ("experiments.txt.seeds=[1]", "no experiment named 'txt'; did you mean 'text'?"),
        ("experiments.text.sedes=[1]", "--set experiments.text.sedes=[1]: experiments[0].sedes"),
        ("defaults.train.lr", "write KEY=VALUE"),
    ],
)
def test_bad_overrides_name_the_override(tmp_path, override, expected):
    path = write_suite(tmp_path / "s.yaml", SUITE)
    with pytest.raises(SuiteError) as err:
        load_suite(path, [override])
    assert expected in str(err.value)


def test_validate_and_run_take_set_and_record_it(tmp_path):
    path = write_suite(tmp_path / "s.yaml", SUITE)
    bad = run_cli("validate", str(path), "--set", "experiments.text.train.batch_size=0")
    assert bad.returncode == 2 and "--set experiments.text.train.batch_size=0" in bad.stderr
    ok = run_cli("validate", str(path), "--set", "experiments.text.seeds=[0,1,2]")
    assert ok.returncode == 0 and "4 cells" in ok.stdout, ok.stderr
    store = tmp_path / "store.sqlite"
    run = run_cli(
        "run",
        str(path),
        "--store",
        str(store),
        "--no-report",
        "--set",
        "experiments.other.kind=bogus",
        "--set",
        "defaults.train.lr=2e-3",
        env={"ATTNBENCH_PLUGINS": "softmax"},
    )
    assert run.returncode == 2 and "--set experiments.other.kind=bogus" in run.stderr
    run = run_cli(
        "run",
        str(path),
        "--store",
        str(store),
        "--no-report",
        "--set",
        "defaults.train.lr=2e-3",
        env={"ATTNBENCH_PLUGINS": "softmax"},
    )
    assert run.returncode == 0, run.stderr
    rows = sqlite3.connect(store).execute("SELECT config, provenance FROM runs").fetchall()
    assert len(rows) == 2
    for config, prov in rows:
        assert json.loads(config)["train"]["lr"] == 2e-3
        assert json.loads(prov)["overrides"] == ["defaults.train.lr=2e-3"]


def test_run_experiments_runs_only_the_named_ones_and_names_the_choices(tmp_path):
    path = write_suite(tmp_path / "s.yaml", SUITE)
    store = tmp_path / "store.sqlite"
    bad = run_cli("run", str(path), "--store", str(store), "--no-report", "--experiments", "other,nope")
    assert bad.returncode == 2 and "nope not in" in bad.stderr and "its experiments are text, other" in bad.stderr
    assert not store.exists()  # refused before the store was opened
    run = run_cli(
        "run",
        str(path),
        "--store",
        str(store),
        "--no-report",
        "--experiments",
        "other",
        env={"ATTNBENCH_PLUGINS": "softmax"},
    )
    assert run.returncode == 0, run.stderr
    assert sqlite3.connect(store).execute("SELECT experiment FROM runs").fetchall() == [("other",)]
