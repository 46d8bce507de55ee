"""The fair-comparison protocol: per-variant tuning chosen on validation, reported on a
test split that took no part in the choice, paired by seed against the baseline; and the
suite errors that guard it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from attnbench.data.builtin import builtin_text
from attnbench.errors import SuiteError
from attnbench.plan.suite import load_suite
from attnbench.report.build import build_report
from attnbench.report.document import Report
from attnbench.report.load import load_store
from attnbench.report.selection import select
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests.helpers import run_cli, write_suite

PROTOCOL_SUITE = """
    version: 1
    name: SUITE_NAME
    device: cpu
    defaults:
      model: {d_model: 32, n_layer: 1, n_head: 2}
    experiments:
      - name: text
        kind: train
        variants: [softmax, linear]
        seeds: [0, 1]
        data: {source: text, path: train.txt, val_path: val.txt, test_path: test.txt}
        train: {budget: {steps: 12}, batch_size: 4, seq_len: 32, warmup_steps: 2, eval_interval: 6,
                eval_tokens: 1024, log_interval: 6, checkpoint: false, checkpoint_interval: 0}
        grid: {lr: [1.0e-3, 1.0e-2]}
        protocol: {baseline: softmax}
"""


def _write_splits(folder: Path, test_text: str) -> None:
    text = builtin_text("tinyshakespeare")
    (folder / "train.txt").write_text(text[:60_000])
    (folder / "val.txt").write_text(text[60_000:70_000])
    (folder / "test.txt").write_text(test_text)


def _run(folder: Path, registry, store_path: Path) -> tuple[dict, dict, Report]:
    suite = load_suite(write_suite(folder / "suite.yaml", PROTOCOL_SUITE.replace("SUITE_NAME", folder.name)))
    with Store(store_path) as store:  # one store: the trust gate's verdicts are reused
        run_suite(suite, store, registry, device="cpu", out=io.StringIO())
    data = load_store(store_path, folder.name)
    runs = data.runs_of("train")
    by_cell = {(r["variant"], r["seed"], r["coords"]["lr"]): r["summary"] for _, r in runs.iterrows()}
    chosen = {s.variant: s.point for s in select(runs)}
    return by_cell, chosen, build_report(data)


def test_choice_reads_validation_only_and_the_report_opens_with_the_test_comparison(tmp_path, registry):
    text = builtin_text("tinyshakespeare")
    clean, corrupt = tmp_path / "clean", tmp_path / "corrupt"
    clean.mkdir()
    corrupt.mkdir()
    _write_splits(clean, text[80_000:90_000])
    _write_splits(corrupt, "".join(chr(33 + (i * 7919) % 90) for i in range(10_000)))  # noise, not text
    cells_a, chosen_a, report_a = _run(clean, registry, tmp_path / "s.sqlite")
    cells_b, chosen_b, report_b = _run(corrupt, registry, tmp_path / "s.sqlite")
    assert len(cells_a) == 8  # every tuning point of every variant and seed is stored
    for key, a in cells_a.items():
        b = cells_b[key]
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-6)  # training and validation untouched
        assert abs(a["test_loss"] - b["test_loss"]) > 0.1  # the test split changed the reported numbers
        assert a["protocol"]["choose_on"] == "val" and "test.txt" in a["protocol"]["splits"]["test"]
    assert chosen_a == chosen_b  # ... but not the chosen points
    first = report_a.sections[0]
    table = first.tables[0]
    assert first.title.startswith("Summary") and table.slug == "summary"
    linear = table.data[table.data["variant"] == "linear"].iloc[0]
    assert linear["n"] == 2 and linear["diff_lo"] < linear["diff_mean"] < linear["diff_hi"]
    assert "paired t" in table.note
    assert any(f.slug.startswith("text-budget-") for f in report_a.figures())  # loss vs tokens, FLOPs, seconds
    other = report_b.sections[0].tables[0].data
    assert other[other["variant"] == "linear"].iloc[0]["diff_mean"] != linear["diff_mean"]
    # paired: the same seed drew the same batches for both variants, another seed others
    streams = {(v, s): c["batch_stream"]["sha256"] for (v, s, lr), c in cells_a.items()}
    assert streams[("softmax", 0)] == streams[("linear", 0)] != streams[("linear", 1)]


def _suite_error(tmp_path: Path, body: str) -> str:
    with pytest.raises(SuiteError) as err:
        load_suite(write_suite(tmp_path / "bad.yaml", body))
    return str(err.value)


BAD = """
    version: 1
    name: bad
    experiments:
      - name: text
        kind: train
        seeds: {seeds}
        data: {data}
        train: {{budget: {{steps: 10}}}}
        grid: {grid}
        protocol: {{}}
"""
GOOD = dict(seeds="[0, 1]", data="{source: builtin, test_fraction: 0.05}", grid="{lr: [1.0e-3, 3.0e-3]}")


@pytest.mark.parametrize(
    "change, expected",
    [
        (dict(grid="{lr: [1.0e-3]}"), "protocol.tune needs a grid of at least 2 points"),
        (dict(grid="{lrr: [1.0e-3, 3.0e-3]}"), "not a train setting (did you mean 'lr'?)"),
        (dict(seeds="[0]"), "protocol.interval needs at least 2 seeds"),
        (dict(data="{source: builtin}"), "set data.test_fraction"),
        (dict(data="{source: text, path: a.txt, val_path: a.txt, test_path: b.txt}"), "data.val_path"),
        (dict(data="{source: text, path: a.txt, val_path: b.txt, test_path: b.txt}"), "is also in data.val_path"),
        (dict(data="{source: task, task: text_recall}"), "set data.test_examples"),
    ],
)
def test_protocol_errors_name_the_key_and_the_fix(tmp_path, change, expected):
    message = _suite_error(tmp_path, BAD.format(**{**GOOD, **change}))
    assert expected in message and "bad.yaml" in message


@pytest.mark.parametrize(
    "replace, expected",
    [
        ("protocol: {margin: .inf}", "experiments[0].protocol.margin: Input should be a finite number (got inf)"),
        ("protocol: {margin: .nan}", "experiments[0].protocol.margin: Input should be a finite number"),
        ("battery: cpu", "experiments[0].battery: battery 'cpu' tags task experiments (data.source: task)"),
    ],
)
def test_an_infinite_margin_or_a_battery_on_text_is_refused(tmp_path, replace, expected):
    message = _suite_error(tmp_path, BAD.format(**GOOD).replace("protocol: {}", replace))
    assert expected in message and "bad.yaml:" in message, message


def test_validate_accepts_the_protocol_and_names_a_missing_baseline(tmp_path):
    ok = write_suite(tmp_path / "ok.yaml", BAD.format(**GOOD))
    result = run_cli("validate", str(ok))
    assert result.returncode == 0, result.stderr
    bad = write_suite(
        tmp_path / "nobase.yaml", BAD.format(**GOOD).replace("protocol: {}", "protocol: {baseline: softmx}")
    )
    result = run_cli("validate", str(bad))
    assert result.returncode != 0 and "softmx" in result.stderr and "protocol" in result.stderr


def test_shipped_protocol_suites_validate():
    for name in ("quick.yaml", "compare.yaml"):
        result = run_cli("validate", f"suites/{name}")
        assert result.returncode == 0, result.stderr


HALVING_SUITE = """
    version: 1
    name: halving
    device: cpu
    defaults:
      model: {d_model: 32, n_layer: 1, n_head: 2}
    experiments:
      - name: text
        kind: train
        variants: [softmax, linear]
        seeds: [0, 1]
        data: {source: text, path: train.txt, val_path: val.txt, test_path: test.txt}
        train: {budget: {steps: 16}, batch_size: 4, seq_len: 32, warmup_steps: 1, eval_interval: 4,
                eval_tokens: 1024, log_interval: 4, checkpoint: false, checkpoint_interval: 0}
        grid: {lr: [1.0e-4, 1.0e-3, 3.0e-3, 3.0e-2]}
        protocol:
          baseline: softmax
          margin: 0.05
          tuning: {seeds: [0], budget: {steps: 2}, eta: 2}
          expectations:
            - {claim: linear trails softmax, source: a paper, variant: linear, outcome: worse}
"""


def _halving_runs(tmp_path: Path, registry) -> list[dict]:
    _write_splits(tmp_path, builtin_text("tinyshakespeare")[70_000:80_000])
    suite = load_suite(write_suite(tmp_path / "suite.yaml", HALVING_SUITE))
    with Store(tmp_path / "s.sqlite") as store:
        first = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        again = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert (first.ran, again.ran, again.skipped) == (first.cells, 0, first.cells)  # resumes: nothing new
        return store.runs("halving")


def test_successive_halving_keeps_the_best_points_on_validation_then_runs_the_survivor_on_every_seed(
    tmp_path, registry
):
    runs = _halving_runs(tmp_path, registry)
    for variant in ("softmax", "linear"):
        mine = [r for r in runs if r["variant"] == variant]
        rungs: dict[int, dict[float, float]] = {}
        for r in mine:
            if r["coords"]["stage"] == "tune":
                assert r["seed"] == 0 and r["config"]["train"]["budget"]["steps"] == 2 * 2 ** r["coords"]["rung"]
                rungs.setdefault(r["coords"]["rung"], {})[r["coords"]["lr"]] = r["summary"]["val_loss"]
        # 4 points at 2 steps -> best 2 at 4 steps -> best 1 (8 < 16 steps would be a rung of one: final)
        assert [len(rungs[k]) for k in sorted(rungs)] == [4, 2]
        best0 = sorted(rungs[0], key=lambda lr: rungs[0][lr])[:2]
        assert sorted(rungs[1]) == sorted(best0)
        final = [r for r in mine if r["coords"]["stage"] == "final"]
        assert sorted(r["seed"] for r in final) == [0, 1]
        assert {r["coords"]["lr"] for r in final} == {min(rungs[1], key=lambda lr: rungs[1][lr])}
        assert all(r["config"]["train"]["budget"]["steps"] == 16 and "rung" not in r["coords"] for r in final)


def test_the_report_decides_each_row_on_the_final_runs_and_checks_the_stated_findings(tmp_path, registry):
    _halving_runs(tmp_path, registry)
    report = build_report(load_store(tmp_path / "s.sqlite", "halving"))
    summary = next(t for s in report.sections for t in s.tables if t.slug == "summary").data
    linear = summary[summary["variant"] == "linear"].iloc[0]
    decisions = ("better", "worse", "equivalent", "undetermined", "not learned", "baseline not learned")
    assert linear["decision"] in decisions and linear["n"] == 2
    assert linear["grid_points"] == 4 and linear["margin"] == 0.05  # 4 points tried; reported: the survivor
    findings = next(t for s in report.sections for t in s.tables if t.slug == "expectations").data
    row = findings.iloc[0]
    assert row["expected"] == "worse" and row["decision"] == linear["decision"]
    untestable = "not testable at this budget"
    verdicts = {
        "worse": "agrees",
        "undetermined": "undetermined",
        "not learned": untestable,
        "baseline not learned": untestable,
    }
    assert row["verdict"] == verdicts.get(row["decision"], "disagrees")
    trail = next(t for s in report.sections for t in s.tables if t.slug == "tuning").data
    mine = trail[trail["variant"] == "linear"]
    assert list(mine["rung"]) == [0, 0, 0, 0, 1, 1] and mine["went_on"].sum() == 3  # 2 of 4, then 1 of 2


def test_a_tuned_experiment_cannot_feed_finetune(tmp_path, registry):
    # lm_eval can: it waits for the chosen point's final cells (tests/test_tuned_lm_eval.py)
    body = (
        HALVING_SUITE
        + """
      - name: ft
        kind: finetune
        variants: [softmax, linear]
        finetune: {from_experiment: text, budget: {steps: 2}, batch_size: 4, seq_len: 32}
"""
    )
    _write_splits(tmp_path, "x" * 2000)
    res = run_cli("validate", str(write_suite(tmp_path / "suite.yaml", body)))
    assert res.returncode != 0 and "tunes by successive halving (protocol.tuning)" in res.stderr


@pytest.mark.parametrize(
    "tuning, message",
    [
        ("{budget: {tokens: 100}}", "protocol.tuning.budget is in tokens and train.budget in steps"),
        ("{budget: {steps: 16}}", "must be smaller than train.budget"),
    ],
)
def test_tuning_budget_errors_name_the_fix(tmp_path, tuning, message):
    body = HALVING_SUITE.replace("tuning: {seeds: [0], budget: {steps: 2}, eta: 2}", f"tuning: {tuning}")
    assert body != HALVING_SUITE
    _write_splits(tmp_path, "x" * 2000)
    with pytest.raises(SuiteError, match=message):
        load_suite(write_suite(tmp_path / "suite.yaml", body))
