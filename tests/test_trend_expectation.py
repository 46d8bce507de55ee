"""Trend claims checked as trends (issues 55 and 56), through `attnbench report` on a hand-made
store: "linear recalls fewer pairs as pairs grow" is not testable where linear never learned at the
easiest setting (2 pairs), whatever it scores at 6; it agrees where linear learned at 2 pairs on
every seed and is worse at 6; a trend needs a setting naming its axis (refused at load)."""

from __future__ import annotations

import ast

import pandas as pd
import pytest

from attnbench.cli import main
from attnbench.errors import SuiteError
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import load_suite
from attnbench.store.database import Result, Store
from tests.helpers import write_suite
from tests.report_store import protocol_dict, record

PAIRS = (2, 4, 6)
NULL = {2: 0.55, 4: 0.32, 6: 0.27}  # measured null levels per number of pairs
ANSWERS = 512.0
CLAIM = {
    "claim": "linear recalls fewer bindings than softmax as pairs grow",
    "source": "Zoology",
    "variant": "linear",
    "versus": None,
    "outcome": "worse",
    "setting": {"num_kv_pairs": 6},
    "trend": "num_kv_pairs",
}


def _store(tmp_path, linear: dict[int, float]) -> pd.DataFrame:
    """Softmax learns every setting; linear's accuracy per number of pairs is ``linear`` on
    every seed (give or take 0.005)."""
    softmax = {2: 0.99, 4: 0.98, 6: 0.97}
    path = tmp_path / "s.sqlite"
    config = {"data": {"source": "task", "task": "mqar", "eval_settings": [{"num_kv_pairs": k} for k in PAIRS]}}
    with Store(path) as store:
        for v, acc in (("softmax", softmax), ("linear", linear)):
            for seed in range(6):  # 6 paired seeds: the fewest a paired decision needs
                results = []
                for k in PAIRS:
                    tags = {"split": "test", "task": "mqar", "num_kv_pairs": k}
                    value = acc[k] + 0.005 * (seed % 3 - 1)
                    results += [
                        Result("accuracy", value, "", tags),
                        Result("guess_accuracy", NULL[k], "", tags),
                        Result("answers", ANSWERS, "count", tags),
                    ]
                summary = {
                    "val_loss": 1.0,
                    "test_loss": 1.0,
                    "test_accuracy": sum(acc.values()) / 3 + 0.005 * (seed % 3 - 1),
                    "test_guess_accuracy": sum(NULL.values()) / 3,
                    "test_answers_total": 3 * ANSWERS,
                    "protocol": protocol_dict("accuracy", [CLAIM], None),
                }
                run = record(f"{v}-{seed}", "recall", "train", v, seed, {"lr": 1e-3}, config, summary, results)
                store.save_run(run)
    out = tmp_path / "report"
    assert main(["report", "--store", str(path), "--suite", "screen", "--out", str(out)]) == 0
    return pd.read_parquet(out / "tables" / "expectations.parquet")


def test_a_trend_is_not_testable_where_the_variant_never_learned_at_the_easiest_setting(tmp_path):
    found = _store(tmp_path, {2: 0.55, 4: 0.36, 6: 0.31})  # at the null at 2 pairs; a little above it at 6
    row = found.iloc[0]
    assert row["verdict"] == "not testable at this budget"
    assert row["found"] == "not testable at this budget: linear did not learn at num_kv_pairs=2"


def test_a_trend_agrees_where_the_variant_learned_at_the_easiest_setting_and_falls_at_the_hardest(tmp_path):
    found = _store(tmp_path, {2: 0.97, 4: 0.70, 6: 0.50})
    row = found.iloc[0]
    assert row["verdict"] == "agrees", row["found"]
    assert row["found"].endswith("worse")


SUITE = """
    version: 1
    name: trend
    device: cpu
    experiments:
      - name: recall
        kind: train
        variants: [softmax, linear]
        seeds: [0, 1]
        models: [{d_model: 16, n_layer: 1, n_head: 2}]
        data: {source: task, task: mqar, test_examples: 8, eval_settings: [{num_kv_pairs: 2}, {num_kv_pairs: 4}]}
        train: {budget: {steps: 4}, batch_size: 2, seq_len: 16, checkpoint: false, checkpoint_interval: 0}
        protocol:
          tune: false
          metric: accuracy
          expectations:
            - {claim: c, source: s, variant: linear, outcome: worse, trend: num_kv_pairs, SETTING}
"""


def test_a_trend_needs_a_setting_on_its_axis(tmp_path):
    ok = load_suite(write_suite(tmp_path / "ok.yaml", SUITE.replace("SETTING", "setting: {num_kv_pairs: 4}")))
    exp = ok.experiments[0]
    assert isinstance(exp, TrainExperiment) and exp.protocol is not None
    assert exp.protocol.expectations[0].trend == "num_kv_pairs"
    with pytest.raises(SuiteError, match="trend 'num_kv_pairs' needs its setting at the hardest point") as refused:
        load_suite(write_suite(tmp_path / "bad.yaml", SUITE.replace(", SETTING", "")))
    # the fix the message suggests is one of the experiment's own eval settings, and is accepted (issue 66)
    suggested = str(refused.value).split("e.g. setting: ")[1].split("; got")[0]
    fixed = load_suite(write_suite(tmp_path / "fixed.yaml", SUITE.replace("SETTING", f"setting: {suggested}")))
    exp = fixed.experiments[0]
    assert isinstance(exp, TrainExperiment) and exp.protocol is not None
    assert exp.protocol.expectations[0].setting == ast.literal_eval(suggested)
    with pytest.raises(
        SuiteError, match=r"trend 'pairs' is not a key of data.eval_settings \(keys: \['num_kv_pairs'\]\)"
    ):
        load_suite(write_suite(tmp_path / "axis.yaml", SUITE.replace("trend: num_kv_pairs, SETTING", "trend: pairs")))
