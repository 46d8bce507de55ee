"""Trackers: `--track tensorboard` writes event files that TensorBoard's own reader loads
with the same training curve as the store; unknown trackers fail before anything runs;
plugins add trackers through `attnbench_register_trackers`."""

from __future__ import annotations

import sqlite3

import pytest

from tests.helpers import run_cli, write_suite

SUITE = """
version: 1
name: tracked
experiments:
  - name: text
    kind: train
    variants: [softmax]
    models: [{d_model: 32, n_layer: 1, n_head: 2}]
    data: {source: builtin, max_bytes: 20000}
    train: {budget: {steps: 12}, batch_size: 4, seq_len: 32, warmup_steps: 2, eval_interval: 6,
            eval_tokens: 512, log_interval: 3, checkpoint_interval: 0, checkpoint: false}
"""


def test_tensorboard_event_files_hold_the_stored_curve(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    store = tmp_path / "store.sqlite"
    path = write_suite(tmp_path / "tracked.yaml", SUITE)
    result = run_cli("run", str(path), "--store", str(store), "--no-report", "--track", "tensorboard",
                     env={"ATTNBENCH_PLUGINS": "softmax"})
    assert result.returncode == 0, result.stderr
    runs = [p.parent for p in (tmp_path / "tracking" / "tensorboard" / "tracked").rglob("events.out.tfevents.*")]
    assert len(runs) == 1 and runs[0].name == "seed0"
    acc = event_accumulator.EventAccumulator(str(runs[0]))
    acc.Reload()
    db = sqlite3.connect(store)
    for name in ("train/loss", "val/loss", "train/lr"):
        stored = db.execute("SELECT step, value FROM metrics WHERE name = ? ORDER BY step", (name,)).fetchall()
        tracked = [(e.step, e.value) for e in acc.Scalars(name)]
        assert len(stored) >= 2 and [s for s, _ in tracked] == [s for s, _ in stored]
        assert [v for _, v in tracked] == pytest.approx([v for _, v in stored], rel=1e-6)  # float32 in events
    loss_row = db.execute("SELECT value FROM results WHERE name = 'loss'").fetchone()[0]
    [eval_tag] = [t for t in acc.Tags()["scalars"] if t.startswith("eval/loss")]  # eval/loss[/tags]
    assert acc.Scalars(eval_tag)[0].value == pytest.approx(loss_row, rel=1e-6)


def test_unknown_tracker_fails_before_running(tmp_path):
    path = write_suite(tmp_path / "tracked.yaml", SUITE)
    result = run_cli("run", str(path), "--store", str(tmp_path / "s.sqlite"), "--track", "tensorbord",
                     env={"ATTNBENCH_PLUGINS": "softmax"})
    assert result.returncode == 2 and "unknown tracker 'tensorbord'" in result.stderr
    assert "tensorboard" in result.stderr and "[1/1]" not in result.stderr


def test_a_plugin_tracker_receives_every_stored_cell(tmp_path):
    from attnbench import get_plugin_manager, hookimpl, load_registry
    from attnbench.plan.suite import load_suite
    from attnbench.run.runner import run_suite
    from attnbench.store.database import Store
    from attnbench.track.base import TrackerSpec
    from attnbench.track.registry import make_trackers, registered_trackers

    seen = []

    class Recorder:
        def __init__(self, out_dir, suite):
            self.where = (out_dir, suite)

        def log_cell(self, cell, metrics, results):
            seen.append((cell["experiment"], {m.name for m in metrics}, {r.name for r in results}))

        def close(self):
            pass

    class Plugin:
        @hookimpl
        def attnbench_register_trackers(self, register):
            register(TrackerSpec("recorder", Recorder, "records what it is sent"))

    plugins = [("recorder-plugin", Plugin())]
    assert {"tensorboard", "wandb", "mlflow", "recorder"} <= set(registered_trackers(plugins))
    suite = load_suite(write_suite(tmp_path / "tracked.yaml", SUITE))
    [tracker] = make_trackers(["recorder"], tmp_path / "tracking", suite.name, plugins)
    assert tracker.where == (tmp_path / "tracking" / "recorder", "tracked")
    with Store(tmp_path / "s.sqlite") as store:
        run_suite(suite, store, load_registry(get_plugin_manager()), device="cpu", only_variants=["softmax"],
                  trackers=[tracker])
    assert seen == [("text", {"train/loss", "train/lr", "val/loss", "val/bpb", "val/ppl"}, {"loss", "bpb", "ppl"})]
