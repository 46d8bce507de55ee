"""lm-eval on a tuned experiment's chosen model (issue 61): an `lm_eval` experiment reading a
train experiment with protocol.tuning validates, scores exactly the chosen point's final
cells once successive halving has chosen, resumes by key, and its rows reach the report."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from attnbench.data.builtin import builtin_text
from attnbench.errors import SuiteError
from attnbench.experiments.registry import expand_suite
from attnbench.plan.suite import load_suite
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, write_suite

TASKS = REPO / "suites" / "lm_eval_tasks"
SUITE = """
    version: 1
    name: tuned-lm-eval
    device: cpu
    defaults:
      model: {{d_model: 16, n_layer: 1, n_head: 2}}
      variants: [softmax]
      seeds: [0, 1]
    experiments:
      - name: text
        kind: train
        data: {{source: text, path: train.txt, val_path: val.txt, test_path: test.txt}}
        train: {{budget: {{steps: 6}}, batch_size: 4, seq_len: 32, warmup_steps: 1, eval_interval: 3,
                eval_tokens: 512, log_interval: 3, checkpoint: true, checkpoint_interval: 0}}
        grid: {{lr: [1.0e-4, 1.0e-2]}}
        protocol: {{baseline: softmax, tuning: {{seeds: [0], budget: {{steps: 2}}, eta: 2}}}}
      - name: ev
        kind: lm_eval
        seeds: {ev_seeds}
        lm_eval: {{from_experiment: text, tasks: [attnbench_heldout_text], include_path: {tasks},
                  paths: {{text_path: heldout.txt}}, batch_size: 8}}
"""


def _suite(folder: Path, ev_seeds: str = "[0, 1]") -> Path:
    text = builtin_text("tinyshakespeare")
    for name, part in (("train", text[:40_000]), ("val", text[40_000:44_000]), ("test", text[44_000:48_000])):
        (folder / f"{name}.txt").write_text(part)
    (folder / "heldout.txt").write_text(text[50_000:50_600])
    return write_suite(folder / "suite.yaml", SUITE.format(tasks=TASKS, ev_seeds=ev_seeds))


def test_validate_accepts_lm_eval_on_a_tuned_experiment_and_counts_its_cells(tmp_path):
    result = run_cli("validate", str(_suite(tmp_path)))
    assert result.returncode == 0, result.stderr
    # now: 2 tuning cells; once chosen: + 2 final seeds + 2 lm_eval cells reading them
    assert "ok (2 experiments, 2 cells; 6 once successive halving has chosen)" in result.stdout


def test_a_seed_the_chosen_point_never_trains_is_refused(tmp_path, registry):
    suite = load_suite(_suite(tmp_path, ev_seeds="[0, 7]"))
    with pytest.raises(SuiteError, match=r"trains its chosen point on seeds \[0, 1\], so seed 7 has no checkpoint"):
        expand_suite(suite, registry)


def test_a_template_that_reads_nothing_is_said_at_the_end_of_a_run(tmp_path, registry):
    """Before the choice every lm_eval cell is a template reading nothing: each is named with
    the experiment whose final cell it waits for (a run prints these lines when it ends)."""
    from attnbench.plan.after_tuning import unread

    cells = expand_suite(load_suite(_suite(tmp_path)), registry)
    assert unread(cells) == [
        f"ev: softmax seed {s} scored no checkpoint: experiment 'text' trained no final cell of it "
        "(its seeds stopped once decided, or its tuning chose nothing)"
        for s in (0, 1)
    ]


def test_lm_eval_scores_the_chosen_points_final_cells_resumes_and_reports(tmp_path, registry):
    suite = load_suite(_suite(tmp_path))
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        first = run_suite(suite, store, registry, device="cpu", out=(log := io.StringIO()))
        again = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        runs = store.runs(suite="tuned-lm-eval")
        rows = {r["id"]: store.results(r["id"]) for r in runs if r["experiment"] == "ev"}
    assert first.not_done == [] and (first.cells, first.ran) == (6, 6)
    assert "scored no checkpoint" not in log.getvalue()  # every template found its final cell
    assert (again.cells, again.ran, again.skipped) == (6, 0, 6)  # resumed by key: nothing runs again
    train = [r for r in runs if r["experiment"] == "text"]
    final = {r["cell_key"]: r for r in train if r["coords"]["stage"] == "final"}
    tuning = {r["cell_key"] for r in train if r["coords"]["stage"] == "tune"}
    assert len(tuning) == 2 and sorted(r["seed"] for r in final.values()) == [0, 1]
    assert len({r["coords"]["lr"] for r in final.values()}) == 1  # the chosen point
    evals = [r for r in runs if r["experiment"] == "ev"]
    assert all(r["status"] == "done" for r in evals), [r["error"] for r in evals]
    read = sorted(r["config"]["key_inputs"]["train_cell_key"] for r in evals)
    assert read == sorted(final) and not set(read) & tuning  # exactly the final cells, never a tuning cell
    for r in evals:
        assert r["seed"] == final[r["summary"]["train_cell_key"]]["seed"]
        assert {x["name"] for x in rows[r["id"]]} >= {"bits_per_byte"}
        assert all(x["tags"]["train_run_id"] == final[x["tags"]["train_cell_key"]]["id"] for x in rows[r["id"]])
    report = build_report(load_store(store_path, "tuned-lm-eval"))
    titles = [s.title for s in report.sections]
    assert "Downstream (lm-eval): ev" in titles
    downstream = next(s for s in report.sections if s.title == "Downstream (lm-eval): ev")
    scores = downstream.tables[0].data
    assert sorted(scores[scores["metric"] == "bits_per_byte"]["seed"]) == [0, 1]
