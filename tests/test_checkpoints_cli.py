"""Checkpoints you can find and several baselines (issue 30, items 2 and 3), through the CLI.

One tiny suite is trained once for the module (d_model 16, 1 layer, 4 steps; softmax and
linear x 2 seeds x 2 learning rates, compared with both as baselines): `attnbench checkpoints`
lists and filters its checkpoint files, `export --best` exports the chosen run, and the
report's first table and CSVs carry a Δ per baseline and the chosen run's cell key. The
chosen point and run are recomputed here from the store's rows, independently of the report.
A synthetic store (tests/report_store.py) checks the per-baseline decisions on task accuracy.
"""

from __future__ import annotations

import json
import re
import sqlite3
import statistics
from pathlib import Path

import pandas as pd
import pytest

from attnbench.cli import main
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import load_suite
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from tests.helpers import write_suite
from tests.report_store import RECALL_TEST, write_store
from tests.report_store import SUITE as SYNTHETIC

SUITE = """
    version: 1
    name: ckpt
    device: cpu
    defaults:
      model: {d_model: 16, n_layer: 1, n_head: 2}
    experiments:
      - name: text
        kind: train
        variants: [softmax, linear]
        seeds: [0, 1]
        data: {source: builtin, max_bytes: 20000, test_fraction: 0.05}
        train: {budget: {steps: 4}, batch_size: 2, seq_len: 16, warmup_steps: 1, eval_interval: 4,
                eval_tokens: 256, log_interval: 2, checkpoint_interval: 0}
        grid: {lr: [1.0e-3, 1.0e-2]}
        protocol: {baselines: [softmax, linear]}
"""
DELTA_SOFTMAX, DELTA_LINEAR = "Δ vs softmax [95% CI], n, decision", "Δ vs linear [95% CI], n, decision"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ckpt")
    suite = write_suite(root / "ckpt.yaml", SUITE)
    assert main(["run", str(suite), "--store", str(root / "store.sqlite")]) == 0
    return root / "store.sqlite"


def _oracle(store: Path) -> dict[str, dict]:
    """Per variant, from the raw rows: the chosen lr (lowest mean val loss over seeds), then the
    chosen run (that lr's seed with the lowest val loss), and every run's key by (lr, seed)."""
    db = sqlite3.connect(store)
    rows = [
        (v, json.loads(c), json.loads(s), k)
        for v, c, s, k in db.execute("SELECT variant, coords, summary, cell_key FROM runs WHERE kind = 'train'")
    ]
    db.close()
    out: dict[str, dict] = {}
    for variant in ("softmax", "linear"):
        mine = [(c["lr"], c["seed"], s["val_loss"], k) for v, c, s, k in rows if v == variant]
        lr = min({r[0] for r in mine}, key=lambda x: statistics.fmean(r[2] for r in mine if r[0] == x))
        best = min((r for r in mine if r[0] == lr), key=lambda r: (r[2], r[1]))
        out[variant] = {
            "lr": lr,
            "key": best[3],
            "point_keys": {r[3] for r in mine if r[0] == lr},
            "keys": {(r[0], r[1]): r[3] for r in mine},
        }
    return out


def _listed(out: str) -> list[dict[str, str]]:
    lines = out.strip().splitlines()
    header = re.split(r"\s{2,}", lines[0])
    return [dict(zip(header, re.split(r"\s{2,}", line), strict=True)) for line in lines[1:]]


def test_checkpoints_lists_every_run_with_its_file_and_filters(trained, capsys):
    oracle = _oracle(trained)
    rc, out, err = cli(capsys, "checkpoints", "--store", str(trained))
    assert rc == 0, err
    rows = _listed(out)
    assert len(rows) == 8  # 2 variants x 2 seeds x 2 learning rates, every one kept its model
    for r in rows:
        assert Path(r["path"]).is_file() and Path(r["path"]).name == f"{r['key']}.pt"
        lr = float(r["grid point"].removeprefix("lr="))
        assert r["key"] == oracle[r["variant"]]["keys"][(lr, int(r["seed"]))]
        assert r["suite"] == "ckpt" and r["experiment"] == "text" and r["model"] == "d16 L1 H2"
    linear = [r for r in rows if r["variant"] == "linear"]
    assert all("feature_map=elu" in r["options"] for r in linear)  # the variant's options, as it ran

    rc, out, _ = cli(capsys, "checkpoints", "--store", str(trained), "--variant", "linear", "--chosen")
    chosen = _listed(out)
    assert rc == 0 and {r["variant"] for r in chosen} == {"linear"}
    assert {r["key"] for r in chosen} == oracle["linear"]["point_keys"]  # both seeds at the chosen lr
    assert [r["key"] for r in chosen if r["chosen"] == "run"] == [oracle["linear"]["key"]]

    rc, _, err = cli(capsys, "checkpoints", "--store", str(trained), "--variant", "lineer")
    assert rc == 2 and "no checkpoints of variant 'lineer'" in err and "did you mean 'linear'?" in err
    rc, _, err = cli(capsys, "checkpoints", "--store", str(trained), "--suite", "ckp")
    assert rc == 2 and "suite 'ckp' has no runs" in err and "did you mean 'ckpt'?" in err


def test_export_best_writes_the_chosen_run_and_the_report_names_its_key(trained, tmp_path, capsys):
    oracle = _oracle(trained)
    out = tmp_path / "best"
    rc, text, err = cli(capsys, "export", "--best", "linear", "--experiment", "text", "--store", str(trained), str(out))
    assert rc == 0, err
    assert f"key {oracle['linear']['key']}" in text
    assert json.loads((out / "config.json").read_text())["provenance"]["cell_key"] == oracle["linear"]["key"]
    tables = trained.parent / "reports" / "ckpt" / "tables"
    for slug in ("summary", "text-variants"):
        keys = pd.read_csv(tables / f"{slug}.csv").set_index("variant")["key"]
        assert keys["linear"] == oracle["linear"]["key"] and keys["softmax"] == oracle["softmax"]["key"]

    for args, words in (
        (["--best", "linear", "--experiment", "txt"], ["experiment 'txt' has no train runs", "did you mean 'text'?"]),
        (
            ["--best", "lineer", "--experiment", "text"],
            ["variant 'lineer' has no runs in experiment 'text'", "did you mean 'linear'?"],
        ),
        (["--experiment", "text", "ckpt.pt"], ["--experiment goes with --best VARIANT"]),
        (["--best", "linear", "ckpt.pt"], ["with --best linear give only OUT_DIR"]),
    ):
        rc, _, err = cli(capsys, "export", "--store", str(trained), *args, str(tmp_path / "other"))
        assert rc == 2 and all(w in err for w in words), err
        assert not (tmp_path / "other").exists()


def test_export_best_says_when_the_chosen_run_kept_no_checkpoint(trained, tmp_path, capsys):
    synthetic = write_store(tmp_path / "s.sqlite")  # runs that recorded no checkpoint
    rc, _, err = cli(
        capsys, "export", "--best", "linear", "--experiment", "text", "--store", str(synthetic), str(tmp_path / "out")
    )
    assert rc == 2 and "the chosen run of linear in experiment 'text'" in err and "kept no checkpoint" in err
    assert "(seed 0, key screen-text-linear-final-0)" in err  # final seeds' val loss 2.25 / 2.28 / 2.26
    assert "train.checkpoint: true" in err
    kept = Path(
        next(
            r
            for r in _listed(cli(capsys, "checkpoints", "--store", str(trained), "--chosen")[1])
            if r["variant"] == "softmax" and r["chosen"] == "run"
        )["path"]
    )
    aside = kept.with_name("aside.pt")
    kept.rename(aside)  # the file of the chosen run is gone
    try:
        rc, _, err = cli(capsys, "export", "--best", "softmax", "--store", str(trained), str(tmp_path / "out"))
        assert rc == 2 and f"recorded checkpoint {kept}, but it is not there" in err
        rc, out, _ = cli(capsys, "checkpoints", "--store", str(trained), "--chosen", "--variant", "softmax")
        assert rc == 0 and f"{kept} (missing)" in out and "1 checkpoint file(s) missing" in out
    finally:
        aside.rename(kept)
    assert not (tmp_path / "out").exists()


def test_the_first_table_and_csv_carry_a_difference_per_baseline(trained):
    summary = pd.read_csv(trained.parent / "reports" / "ckpt" / "tables" / "summary.csv").set_index("variant")
    rows = summary.to_dict("index")  # variant -> {column: value}
    softmax, linear = rows["softmax"], rows["linear"]
    assert softmax["decision"] == "baseline" and linear["vs_linear_decision"] == "baseline"
    # the same seeds paired both ways: linear - softmax, and softmax - linear
    assert linear["n"] == softmax["vs_linear_n"] == 2
    assert softmax["vs_linear_diff_mean"] == pytest.approx(-linear["diff_mean"])
    assert softmax["baselines"] == "softmax, linear"
    report = (trained.parent / "reports" / "ckpt" / "report.md").read_text().replace("\\[", "[").replace("\\]", "]")
    first = report[report.index("### Summary: each variant against the baseline") :].splitlines()
    header = next(line for line in first if line.startswith("| experiment | variant |"))
    assert f"| {DELTA_SOFTMAX} | {DELTA_LINEAR} |" in header  # the report's first table: a column per baseline


def test_task_accuracy_is_decided_against_each_baseline_per_setting(tmp_path):
    data = load_store(write_store(tmp_path / "s.sqlite", baselines=["softmax", "linear"]), SYNTHETIC)
    report = build_report(data)
    table = report.sections[0].tables[0]
    rows = table.data.set_index(["experiment", "variant", "setting"]).to_dict("index")
    window = rows[("recall", "window", "num_kv_pairs=32")]
    window_acc = RECALL_TEST["window"][32]
    expected = statistics.fmean(a - b for a, b in zip(window_acc, RECALL_TEST["linear"][32], strict=True))
    assert window["metric"] == "accuracy" and window["vs_linear_diff_mean"] == pytest.approx(expected)
    assert window["diff_mean"] == pytest.approx(
        statistics.fmean(a - b for a, b in zip(window_acc, RECALL_TEST["softmax"][32], strict=True))
    )
    assert {DELTA_SOFTMAX, DELTA_LINEAR} <= set(table.view.columns)
    headline = report.headline
    assert headline is not None
    sentence = next(s for s in headline.notes if s.startswith("window:"))
    assert "; vs linear " in sentence and "then vs linear" in headline.method


BAD_BASELINES = """
    version: 1
    name: bad
    experiments:
      - name: text
        kind: train
        variants: VARIANTS
        seeds: [0, 1]
        data: {source: builtin, test_fraction: 0.05}
        train: {budget: {steps: 4}}
        grid: {lr: [1.0e-3, 1.0e-2]}
        protocol: PROTOCOL
"""


@pytest.mark.parametrize(
    "variants, protocol, words",
    [
        (
            "[softmax, linear]",
            "{baselines: [softmax, windowed]}",
            ["protocol.baselines[1] 'windowed' is not among this experiment's variants"],
        ),
        (
            "all",
            "{baselines: [softmax, linaer]}",
            ["experiments[0].protocol.baselines[1]: unknown variant 'linaer'", "Did you mean 'linear'?"],
        ),
        (
            "[softmax, linear]",
            "{baseline: linear, baselines: [softmax, linear]}",
            ["protocol.baseline 'linear' is not the first of protocol.baselines"],
        ),
        ("[softmax, linear]", "{baselines: [linear, linear]}", ["protocol.baselines names a variant twice"]),
    ],
)
def test_every_listed_baseline_must_be_run(tmp_path, capsys, variants, protocol, words):
    suite = write_suite(
        tmp_path / "bad.yaml", BAD_BASELINES.replace("VARIANTS", variants).replace("PROTOCOL", protocol)
    )
    rc, _, err = cli(capsys, "validate", str(suite))
    assert rc == 2 and all(w in err for w in words), err
    assert "Traceback" not in err


def test_a_task_is_decided_on_accuracy_unless_the_suite_says_otherwise(tmp_path):
    task = "{source: task, task: mqar, test_examples: 16}"
    suite = write_suite(
        tmp_path / "t.yaml",
        BAD_BASELINES.replace("VARIANTS", "[softmax, linear]")
        .replace("PROTOCOL", "{baseline: softmax}")
        .replace("{source: builtin, test_fraction: 0.05}", task),
    )
    exp = load_suite(suite).experiments[0]
    assert isinstance(exp, TrainExperiment) and exp.protocol is not None and exp.protocol.metric == "accuracy"
    text = write_suite(
        tmp_path / "x.yaml",
        BAD_BASELINES.replace("VARIANTS", "[softmax, linear]").replace("PROTOCOL", "{baselines: [softmax, linear]}"),
    )
    exp = load_suite(text).experiments[0]
    assert isinstance(exp, TrainExperiment)
    protocol = exp.protocol
    assert (
        protocol is not None
        and protocol.metric == "loss"
        and protocol.baseline == "softmax"
        and protocol.compared_with() == ["softmax", "linear"]
    )
