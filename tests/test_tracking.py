"""Trackers: `--track tensorboard|wandb|mlflow` write files that each library's own reader
loads with the same training curve and eval rows as the store (W&B offline, MLflow's local
file store: no server); unknown trackers fail before anything runs; plugins add trackers
through `attnbench_register_trackers`."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib

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


def run_tracked(tmp_path, tracker: str):
    """The tiny suite run through the CLI with ``--track tracker``; (store path, the run)."""
    store = tmp_path / "store.sqlite"
    path = write_suite(tmp_path / "tracked.yaml", SUITE)
    result = run_cli(
        "run", str(path), "--store", str(store), "--no-report", "--track", tracker, env={"ATTNBENCH_PLUGINS": "softmax"}
    )
    assert result.returncode == 0, result.stderr
    return store, result


def test_tensorboard_event_files_hold_the_stored_curve(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    store, result = run_tracked(tmp_path, "tensorboard")
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


CURVES = ("train/loss", "val/loss", "train/lr")


def stored_curves(store) -> dict[str, list[tuple[int, float]]]:
    db = sqlite3.connect(store)
    curves = {
        name: db.execute("SELECT step, value FROM metrics WHERE name = ? ORDER BY step", (name,)).fetchall()
        for name in CURVES
    }
    assert all(len(points) >= 2 for points in curves.values()), curves
    [(loss,)] = db.execute("SELECT value FROM results WHERE name = 'loss'").fetchall()
    db.close()
    return {**curves, "eval/loss": loss}


def wandb_records(path):
    """The Records of an offline run's `.wandb` file, read as wandb-core writes it: a header
    (":W&B", magic 0xBEE1, version) then LevelDB-log chunks (crc32 over type and data, length,
    type) in 32 KiB blocks, each whole record a wandb_internal_pb2.Record. wandb 0.31 ships no
    Python reader (its DataStore went with the Python backend), so the framing is read here."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1)
    pos, pending, records = 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's trailer is padding
            pos += 32768 - pos % 32768
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:  # zero padding at the end
            break
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == checksum
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            # protobuf's generated classes are invisible to the checker (no stubs ship with wandb)
            records.append(wandb_internal_pb2.Record.FromString(pending))  # pyright: ignore[reportAttributeAccessIssue]
            pending = b""
    return records


def test_wandb_offline_run_holds_the_stored_curve(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var, sub in (
        ("WANDB_DIR", "wandb"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_ERROR_REPORTING", raising=False)  # the tracker turns it off itself
    store, result = run_tracked(tmp_path, "wandb")
    assert "wandb: WARNING" not in result.stderr, result.stderr  # e.g. a deprecated init() argument
    [log] = (tmp_path / "tracking" / "wandb").rglob("offline-run-*/run-*.wandb")
    records = wandb_records(log)
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name) == ("tracked", "text/softmax/m0/seed0")
    tracked, summary = {name: [] for name in CURVES}, {}
    for r in records:
        kind = r.WhichOneof("record_type")
        items = r.history.item if kind == "history" else r.summary.update if kind == "summary" else ()
        for item in items:
            key = item.key or "/".join(item.nested_key)
            if kind == "history" and key in tracked:
                tracked[key].append((r.history.step.num, json.loads(item.value_json)))
            elif kind == "summary":
                summary[key] = json.loads(item.value_json)
    stored = stored_curves(store)
    for name in CURVES:
        assert tracked[name] == stored[name], name  # JSON keeps every bit of the stored float
    [eval_key] = [k for k in summary if k.startswith("eval/loss")]  # eval/loss[/tags]
    assert summary[eval_key] == stored["eval/loss"]
    # wandb-core started without its error reporting (no observability upload)
    [core_log] = (tmp_path / "cache").rglob("core-debug-*.log")
    assert json.loads(core_log.read_text().splitlines()[0])["disable-analytics"] is True


def test_mlflow_file_store_holds_the_stored_curve(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # before mlflow is imported here
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # the tracker opts in itself
    mlflow_tracking = pytest.importorskip("mlflow.tracking")
    store, result = run_tracked(tmp_path, "mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads its file store only so
    client = mlflow_tracking.MlflowClient(tracking_uri=(tmp_path / "tracking" / "mlflow").as_uri())
    experiment = client.get_experiment_by_name("tracked")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "text/softmax/m0/seed0" and run.data.tags["status"] == "done"
    stored = stored_curves(store)
    for name in CURVES:
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))
        assert history == stored[name], name
    [eval_key] = [k for k in run.data.metrics if k.startswith("eval/loss")]  # eval/loss[/tags]
    assert run.data.metrics[eval_key] == stored["eval/loss"]


def test_unknown_tracker_fails_before_running(tmp_path):
    path = write_suite(tmp_path / "tracked.yaml", SUITE)
    result = run_cli(
        "run",
        str(path),
        "--store",
        str(tmp_path / "s.sqlite"),
        "--track",
        "tensorbord",
        env={"ATTNBENCH_PLUGINS": "softmax"},
    )
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
    assert isinstance(tracker, Recorder) and tracker.where == (tmp_path / "tracking" / "recorder", "tracked")
    with Store(tmp_path / "s.sqlite") as store:
        run_suite(
            suite,
            store,
            load_registry(get_plugin_manager()),
            device="cpu",
            only_variants=["softmax"],
            trackers=[tracker],
        )
    floors = {
        f"floor_{order}_{unit}" for order in ("unigram", "bigram", "trigram", "4gram") for unit in ("loss", "bpb")
    }
    metrics = {"train/loss", "train/lr", "val/loss", "val/bpb", "val/ppl"}
    assert seen == [("text", metrics, {"loss", "bpb", "ppl", *floors})]  # the null levels go out beside the scores
