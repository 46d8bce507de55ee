"""Learning-rate windows that search until the choice is inside (issue 56): a tuning rung whose
best point lies on an edge of the rates tried adds the next rate beyond it, in the same rung;
the search stops inside the window, at a declared bound, or where the new rate diverged or did
worse. Planned from stored outcomes alone, so a re-run adds nothing; plain lists keep their
meaning; the report draws each variant's curve and names a bound the search stopped at."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attnbench.errors import SuiteError
from attnbench.plan.base import Budget, TrainSpec
from attnbench.plan.cells import Cell, expand
from attnbench.plan.halving import next_cells
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import Suite, load_suite
from attnbench.plan.validation import check_suite
from attnbench.report.build import build_report
from attnbench.report.document import Report
from attnbench.report.load import load_store
from attnbench.run.runner import RunReport, run_suite
from attnbench.store.database import Store
from tests.helpers import write_suite

# Two tiny experiments, each searching lr from two start points at 2 steps on seed 0, then the
# survivor on seeds 0 and 1 at 4 steps. At 2 steps with no warm-up a larger rate is better up to
# ~0.1, and 1.0 diverges (loss above 3 ln 256 at step 2).
#   up:      1e-3, 3e-3 -> 9e-3 -> 2.7e-2, whose next (8.1e-2) passes the upper bound 3e-2
#   diverge: 3e-2, 1e-1 -> 1.0 (diverged): 0.1 is inside
SUITE = """
version: 1
name: window
device: cpu
defaults:
  variants: [softmax]
  seeds: [0, 1]
  data: {source: builtin, max_bytes: 50000, val_fraction: 0.1, test_fraction: 0.1}
  model: {d_model: 16, n_layer: 1, n_head: 2}
  train: {batch_size: 2, seq_len: 16, budget: {steps: 4}, warmup_steps: 0, eval_interval: 2, eval_tokens: 64,
          log_interval: 1, checkpoint: false, checkpoint_interval: 0}
experiments:
  - name: up
    kind: train
    grid: {lr: {start: [1.0e-3, 3.0e-3], factor: 3, bounds: [1.0e-4, 3.0e-2]}}
    protocol: {tuning: {seeds: [0], budget: {steps: 2}}}
  - name: diverge
    kind: train
    grid: {lr: {start: [3.0e-2, 1.0e-1], factor: 10, bounds: [1.0e-3, 1.0]}}
    protocol: {tuning: {seeds: [0], budget: {steps: 2}}}
"""

Ran = tuple[RunReport, RunReport, list[dict[str, Any]], Report]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """The suite run twice on one store (the second a resume), its runs and its report."""
    from attnbench import get_plugin_manager, load_registry

    folder = tmp_path_factory.mktemp("window")
    suite = load_suite(write_suite(folder / "suite.yaml", SUITE))
    registry = load_registry(get_plugin_manager())
    with Store(folder / "s.sqlite") as store:
        first = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        again = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        runs = store.runs("window")
    return first, again, runs, build_report(load_store(folder / "s.sqlite", "window"))


def _tuned(runs: list[dict[str, Any]], exp: str) -> dict[float, dict[str, Any]]:
    return {r["coords"]["lr"]: r for r in runs if r["experiment"] == exp and r["coords"]["stage"] == "tune"}


def _final_lrs(runs: list[dict[str, Any]], exp: str) -> dict[int, float]:
    return {r["seed"]: r["coords"]["lr"] for r in runs if r["experiment"] == exp and r["coords"]["stage"] == "final"}


def _table(report: Report, slug: str) -> Any:
    return next(t for t in report.tables() if t.slug == slug).data


# -- (a) the best point starts on an edge, and the window extends ----------------------------


def test_a_best_point_on_an_edge_adds_the_next_rate_in_the_same_rung_until_the_declared_bound(ran: Ran) -> None:
    _, _, runs, _ = ran
    tuned = _tuned(runs, "up")
    assert sorted(tuned) == [0.001, 0.003, 0.009, 0.027]  # without the window: the 2 start points only
    for r in tuned.values():  # the added rates train in rung 0, on the tuning seed, at the tuning budget
        assert (r["coords"]["rung"], r["seed"], r["config"]["train"]["budget"]["steps"]) == (0, 0, 2)
        assert r["config"]["train"]["lr"] == r["coords"]["lr"]
    losses = [tuned[lr]["summary"]["val_loss"] for lr in sorted(tuned)]
    assert losses == sorted(losses, reverse=True)  # each added rate did better: the search went on
    assert _final_lrs(runs, "up") == {0: 0.027, 1: 0.027}  # 0.081 would pass the bound 0.03


def test_the_report_names_the_bound_the_search_stopped_at_and_draws_each_curve(ran: Ran) -> None:
    _, _, _, report = ran
    bound = [n for n in report.notes if n.kind == "chosen at a declared bound"]
    assert [(n.where.split()[0], n.what) for n in bound] == [("up", "lr stopped at the declared upper bound 0.03")]
    assert "0.001, 0.003, 0.009, 0.027" in bound[0].detail
    assert not [n for n in report.notes if n.kind == "chosen at a grid edge"]  # a searched axis has no grid edge
    grid = _table(report, "grid").set_index("experiment")
    assert grid.loc["up", "grid_edges"] == "lr upper" and grid.loc["diverge", "grid_edges"] == ""
    found = _table(report, "tuning_windows").set_index("experiment")
    assert found.loc["up", "side"] == "upper" and found.loc["diverge", "side"] == ""
    assert found.loc["diverge", "result"].startswith("lr inside the searched window")
    tuning = next(s for s in report.sections if s.title.startswith("Tuning"))
    figure = next(f for f in tuning.figures if f.slug == "tuning_lr")
    assert figure.png.startswith(b"\x89PNG") and "declared bounds" in figure.caption


# -- (b) the added rate diverges: stored, and the edge point is chosen --------------------------


def test_a_diverged_added_rate_is_stored_as_data_and_the_edge_point_is_chosen(ran: Ran) -> None:
    _, _, runs, report = ran
    tuned = _tuned(runs, "diverge")
    assert sorted(tuned) == [0.03, 0.1, 1.0]
    assert tuned[1.0]["status"] == "diverged" and tuned[1.0]["summary"]["diverged_at_step"] is not None
    assert _final_lrs(runs, "diverge") == {0: 0.1, 1: 0.1}  # a worse (diverged) neighbour was tried: inside
    trail = _table(report, "tuning")
    row = trail[(trail["experiment"] == "diverge") & (trail["point"] == "lr=1")].iloc[0]
    assert row["status"] == "diverged" and math.isinf(row["val_loss"]) and bool(row["added_by_search"])
    assert not row["went_on"]


# -- (c) resume: a re-run trains nothing ---------------------------------------------------------


def test_a_re_run_trains_no_cell_the_added_rates_included(ran: Ran) -> None:
    first, again, runs, _ = ran
    assert first.ran == first.cells == len(runs) == 4 + 2 + 3 + 2
    assert (again.ran, again.skipped, again.cells) == (0, first.cells, first.cells)


# -- planning from stored outcomes (no training) ------------------------------------------------

PLAN = """
version: 1
name: plan
device: cpu
experiments:
  - name: t
    kind: train
    variants: [softmax]
    seeds: [0, 1]
    data: {source: builtin, max_bytes: 50000, val_fraction: 0.1, test_fraction: 0.1}
    models: [{d_model: 16, n_layer: 1, n_head: 2}]
    train: {batch_size: 2, seq_len: 16, budget: {steps: 8}, eval_interval: 2, eval_tokens: 64, checkpoint: false}
    grid: {lr: GRID}
    protocol: {tuning: {seeds: [0, 1], budget: {steps: 2}, eta: 2CRITERION}}
"""
WINDOW = "{start: [1.0e-3, 3.0e-3], factor: 3, bounds: [1.0e-4, 1.0e-1]}"
TASK = "{source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 24}, val_examples: 16, test_examples: 16}"
Outcome = Callable[[float], tuple[str, dict[str, Any]]]


def _plan_suite(tmp_path: Path, grid: str, criterion: str = "") -> Suite:
    body = PLAN.replace("GRID", grid).replace("CRITERION", criterion)
    return load_suite(write_suite(tmp_path / f"plan-{len(list(tmp_path.iterdir()))}.yaml", body))


def _planned(suite: Suite, registry: Any, outcome: Outcome) -> list[Cell]:
    """Every cell the runner would plan, each "stored" with ``outcome(lr)`` as it is planned."""
    cells = expand(check_suite(suite, registry, corpus_hash=lambda _d: "corpus"), kind_code=lambda _k: "code")
    stored = {c.key: outcome(c.coords["lr"]) for c in cells}
    wave = cells
    while wave := next_cells(suite, cells, stored.get):
        assert not {c.key for c in wave} & set(stored)  # never a cell planned before
        stored.update({c.key: outcome(c.coords["lr"]) for c in wave})
        cells = cells + wave
    return cells


def _loss_at(best: float) -> Outcome:
    """Validation loss 2 + (log10(lr / best))^2: lowest at ``best``."""
    return lambda lr: ("done", {"val_loss": 2 + math.log10(lr / best) ** 2, "val_accuracy": 0.5})


def _rung0(cells: list[Cell]) -> list[float]:
    return sorted({c.coords["lr"] for c in cells if c.coords.get("rung") == 0})


def _chosen(cells: list[Cell]) -> set[float]:
    return {c.coords["lr"] for c in cells if c.coords.get("stage") == "final"}


def test_the_search_goes_down_from_a_lower_edge_and_stops_once_a_worse_rate_is_tried(tmp_path, registry) -> None:
    cells = _planned(_plan_suite(tmp_path, WINDOW), registry, _loss_at(2e-4))
    assert _rung0(cells) == [0.000111, 0.000333, 0.001, 0.003]  # 1.11e-4 is worse than 3.33e-4: inside
    assert _chosen(cells) == {0.000333}
    added = [c for c in cells if c.coords.get("rung") == 0 and c.coords["lr"] < 1e-3]
    assert sorted(c.seed for c in added) == [0, 0, 1, 1]  # the rung's seeds, its budget
    assert all(c.spec_as(TrainSpec).budget == Budget(steps=2) for c in added)


def test_a_best_rate_already_inside_adds_nothing(tmp_path, registry) -> None:
    window = "{start: [1.0e-3, 3.0e-3, 9.0e-3], factor: 3, bounds: [1.0e-4, 1.0e-1]}"
    cells = _planned(_plan_suite(tmp_path, window), registry, _loss_at(3e-3))
    assert _rung0(cells) == [0.001, 0.003, 0.009] and _chosen(cells) == {0.003}


def test_the_extension_reads_the_tuning_criterion(tmp_path, registry) -> None:
    """Loss is lowest at small rates and accuracy highest at large ones: each criterion searches its own way."""

    def outcome(lr: float) -> tuple[str, dict[str, Any]]:
        accuracy = 0.3 if lr < 2e-3 else 0.5 if lr < 5e-3 else 0.9
        null = {"val_guess_accuracy": 0.2, "val_answers_total": 1000.0}  # every point beyond its null
        return "done", {"val_loss": 2 + math.log10(lr), "val_accuracy": accuracy, **null}

    by_loss = _planned(_plan_suite(tmp_path, WINDOW), registry, outcome)
    assert _rung0(by_loss) == [0.000111, 0.000333, 0.001, 0.003]  # down to the lower bound 1e-4
    assert _chosen(by_loss) == {0.000111}
    task = PLAN.replace("{source: builtin, max_bytes: 50000, val_fraction: 0.1, test_fraction: 0.1}", TASK)
    task = (
        task.replace("seq_len: 16", "seq_len: 24").replace("GRID", WINDOW).replace("CRITERION", ", criterion: accuracy")
    )
    by_accuracy = _planned(load_suite(write_suite(tmp_path / "task.yaml", task)), registry, outcome)
    assert _rung0(by_accuracy) == [0.001, 0.003, 0.009, 0.027]  # 0.027 ties 0.009 on accuracy, loses on loss
    assert _chosen(by_accuracy) == {0.009}


def test_a_rung_where_every_point_failed_chooses_nothing(tmp_path, registry) -> None:
    """Failed and diverged points rank last; when no point is left, no rate is chosen and no
    final runs are planned (not the first point of the grid by default)."""
    cells = _planned(_plan_suite(tmp_path, WINDOW), registry, lambda lr: ("diverged", {"val_loss": math.nan}))
    assert _rung0(cells) == [0.001, 0.003] and _chosen(cells) == set()
    some = _planned(
        _plan_suite(tmp_path, WINDOW), registry, lambda lr: _loss_at(1e-3)(lr) if lr < 2e-3 else ("failed", {})
    )
    assert _chosen(some) == {0.001}  # one point left: it is chosen, once the search stopped


def test_plain_lists_plan_the_same_cells_and_never_extend(tmp_path, registry) -> None:
    plain = _plan_suite(tmp_path, "[1.0e-3, 3.0e-3]")
    window = _plan_suite(tmp_path, WINDOW)
    keys = expand(check_suite(plain, registry, corpus_hash=lambda _d: "c"), kind_code=lambda _k: "h")
    same = expand(check_suite(window, registry, corpus_hash=lambda _d: "c"), kind_code=lambda _k: "h")
    assert [(c.key, c.coords) for c in keys] == [(c.key, c.coords) for c in same]  # the start points are the list
    assert "windows" not in (keys[0].protocol or {}) and "windows" in (same[0].protocol or {})
    cells = _planned(plain, registry, _loss_at(1e-1))  # best at the upper edge: a plain list keeps it
    assert _rung0(cells) == [0.001, 0.003] and _chosen(cells) == {0.003}


# -- (e) schema errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "grid, message",
    [
        ("{start: [3.0e-3, 1.0e-3], bounds: [1.0e-4, 1.0e-1]}", r"start \[0.003, 0.001\] must be ascending"),
        ("{start: [-1.0e-3, 3.0e-3], bounds: [1.0e-4, 1.0e-1]}", "must be positive"),
        ("{start: [1.0e-3, 3.0e-3], factor: 1, bounds: [1.0e-4, 1.0e-1]}", "factor: Input should be greater than 1"),
        ("{start: [1.0e-3, 3.0e-3], bounds: [2.0e-3, 1.0e-1]}", r"bounds \[0.002, 0.1\] must contain start"),
        ("{start: [1.0e-3, 3.0e-3]}", "bounds: Field required"),
        ("{start: [1.0e-3], bounds: [1.0e-4, 1.0e-1]}", "start: List should have at least 2 items"),
        ("{start: [1.0e-3, 3.0e-3], bounds: [1.0e-4, 1.0e-1], step: 2}", "step: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_window_names_the_experiment_and_key(tmp_path, grid, message) -> None:
    with pytest.raises(SuiteError, match=message) as err:
        _plan_suite(tmp_path, grid)
    assert "experiment 't': grid key 'lr' is a search window" in str(err.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("grid: {lr: GRID}", "grid: {batch_size: GRID}"),
            "grid key 'batch_size' is a search window, which multiplies",
        ),
        (
            ("protocol: {tuning: {seeds: [0, 1], budget: {steps: 2}, eta: 2CRITERION}}", "protocol: {}"),
            "which protocol.tuning searches",
        ),
        (("2CRITERION", "2, criterion: accuracy"), "criterion: accuracy reads a task's answers"),
        (("2CRITERION", "2, criterion: speed"), r"criterion: Input should be 'loss' or 'accuracy'"),
    ],
)
def test_window_settings_the_tuner_cannot_search_are_refused(tmp_path, edit, message) -> None:
    body = PLAN.replace(*edit).replace("GRID", WINDOW).replace("CRITERION", "")
    with pytest.raises(SuiteError, match=message):
        load_suite(write_suite(tmp_path / "bad.yaml", body))


def test_the_default_factor_is_the_start_points_own_ratio(tmp_path) -> None:
    suite = _plan_suite(tmp_path, "{start: [3.0e-4, 1.0e-3, 3.3e-3], bounds: [1.0e-4, 1.0e-1]}")
    exp = suite.experiments[0]
    assert isinstance(exp, TrainExperiment)
    window = exp.windows()["lr"]
    assert window.step() == pytest.approx(3.317, abs=1e-3)
    assert window.beyond(3.3e-3, "upper") == 0.0109  # 3.3e-3 x 3.317, to 3 significant digits
    assert window.beyond(3e-4, "lower") is None  # 9.04e-5 would pass the lower bound 1e-4
