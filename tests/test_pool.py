"""`attnbench run --jobs N`: cells in a local pool of single-threaded worker processes store
exactly what one process running them one after another stores; a worker that dies fails
its cell and the run goes on; --jobs is refused where Ray or torchrun place the work."""

from __future__ import annotations

import pytest

from attnbench.cli import main as cli_main
from attnbench.errors import ExecutorError
from attnbench.run.choose import make_executor
from attnbench.run.executors import InProcessExecutor
from attnbench.run.pool import ProcessPoolCellExecutor, default_jobs
from attnbench.store.database import Store
from tests.helpers import fake_distribution, run_cli, write_suite

SUITE = """
    version: 1
    name: pool
    defaults:
      data: {{source: stdlib, max_bytes: 200000}}
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
      train: {{batch_size: 4, seq_len: 32, lr: 1.0e-2, warmup_steps: 2, eval_interval: 4, eval_tokens: 1024,
              log_interval: 2, checkpoint: false}}
    experiments:
      - name: e
        kind: train
        variants: {variants}
        train: {{budget: {{steps: 8}}}}
        seeds: [0, 1]
"""
PLUGINS = {"ATTNBENCH_PLUGINS": "softmax,linear", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _numbers(path) -> dict[str, dict]:
    """Every stored number of every cell, by cell key: the metric curves and the summary's
    losses and accuracies (times and throughput left out: they differ run to run)."""
    out = {}
    with Store(path) as store:
        runs = store.runs()
        assert len({r["cell_key"] for r in runs}) == len(runs)  # each key stored exactly once
        for run in runs:
            assert run["status"] == "done", run["error"]
            summary = {k: v for k, v in run["summary"].items() if "loss" in k or "acc" in k or k == "steps"}
            curves = [
                (m["name"], m["step"], m["value"])
                for m in store.metrics(run["id"])
                if "loss" in m["name"] or "acc" in m["name"]
            ]
            out[run["cell_key"]] = {
                "summary": summary,
                "curves": curves,
                "worker": run["provenance"]["worker"],
                "threads": run["provenance"]["torch_threads"],
            }
    return out


def test_two_workers_store_what_one_process_stores(tmp_path):
    suite = write_suite(tmp_path / "pool.yaml", SUITE.format(variants="[softmax, linear]"))
    for jobs in ("2", "1"):  # both single-threaded per cell (OMP_NUM_THREADS=1 for the one process)
        proc = run_cli(
            "run",
            str(suite),
            "--store",
            str(tmp_path / jobs / "store.sqlite"),
            "--jobs",
            jobs,
            "--device",
            "cpu",
            "--no-report",
            env=PLUGINS,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "4 cells, 4 run, 0 already stored" in proc.stdout
        started = [line.split()[0] for line in proc.stderr.splitlines() if line.startswith("[") and " e " in line]
        assert sorted(started) == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], proc.stderr

    single, pool = _numbers(tmp_path / "1" / "store.sqlite"), _numbers(tmp_path / "2" / "store.sqlite")
    assert sorted(single) == sorted(pool) and len(pool) == 4
    for key, cell in pool.items():
        assert cell["curves"] and cell["summary"]["val_loss"] > 0
        assert (cell["summary"], cell["curves"]) == (single[key]["summary"], single[key]["curves"]), key
        assert cell["worker"]["executor"] == "process-pool" and cell["worker"]["threads"] == cell["threads"] == 1
        assert single[key]["worker"]["executor"] == "in-process" and single[key]["threads"] == 1
    assert len({c["worker"]["pid"] for c in pool.values()} | {c["worker"]["pid"] for c in single.values()}) >= 2


DOOMED = """
    import multiprocessing
    import os
    import signal
    import time
    from pathlib import Path

    from attnbench import Variant, hookimpl
    from attnbench.plugins.attention.softmax import flops_per_token, state_size
    from attnbench.plugins.attention.softmax_model import SoftmaxAttention

    MARKS = Path(os.environ["DOOMED_MARKS"])


    def _wait_for(name):
        deadline = time.time() + 120
        while not (MARKS / name).exists() and time.time() < deadline:
            time.sleep(0.05)


    def build_bystander(config, layer_idx):
        if multiprocessing.parent_process() is not None and not (MARKS / "killed").exists():
            (MARKS / "bystander-started").touch()
            _wait_for("never")  # in flight until the pool, broken by the other's death, ends this worker
        return SoftmaxAttention(config, layer_idx)


    def build_doomed(config, layer_idx):
        if multiprocessing.parent_process() is not None and not (MARKS / "killed").exists():
            _wait_for("bystander-started")  # two cells in flight
            (MARKS / "killed").touch()
            os.kill(os.getpid(), signal.SIGKILL)  # once, as the OOM killer does it: a re-run would finish
        return SoftmaxAttention(config, layer_idx)


    @hookimpl
    def attnbench_register_variants(register):
        for name, build in (("bystander", build_bystander), ("doomed", build_doomed)):
            register(Variant(name=name, build_mixer=build, decode="kv_cache",
                             state_size=state_size, flops_per_token=flops_per_token))
"""


def _killed_run(tmp_path, retries: int):
    env = fake_distribution(tmp_path, "doomed_dist", "doomed", DOOMED, module="doomed_plugin")
    (tmp_path / "marks").mkdir()
    suite = write_suite(tmp_path / "s.yaml", SUITE.format(variants="[bystander, doomed]"))
    store_path = tmp_path / "store.sqlite"
    proc = run_cli(
        "run",
        str(suite),
        "--store",
        str(store_path),
        "--jobs",
        "2",
        "--device",
        "cpu",
        "--no-report",
        "--set",
        "experiments.e.seeds=[0]",
        "--set",
        f"retries={retries}",
        env={**env, **PLUGINS, "ATTNBENCH_PLUGINS": "doomed", "DOOMED_MARKS": str(tmp_path / "marks")},
        timeout=300,
    )
    with Store(store_path) as store:
        runs = {r["variant"]: r for r in store.runs()}
        attempts = {v: store.attempts(r["cell_key"]) for v, r in runs.items()}
    return proc, runs, attempts


def test_a_killed_worker_is_one_attempt_and_one_line_and_fails_its_cell_at_retries_0(tmp_path):
    proc, runs, attempts = _killed_run(tmp_path, retries=0)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "2 cells, 2 run, 0 already stored" in proc.stdout
    deaths = [line for line in proc.stderr.splitlines() if "worker process died" in line]
    assert len(deaths) == 1, proc.stderr[-3000:]
    assert "SIGKILL" in deaths[0] and "e/doomed seed 0" in deaths[0] and "e/bystander seed 0" in deaths[0]
    assert runs["bystander"]["status"] == "done" and attempts["bystander"] == []  # in flight beside it, run again
    dead = runs["doomed"]
    assert dead["status"] == "failed" and "the worker process running this cell died (SIGKILL)" in dead["error"]
    assert dead["provenance"]["worker"] == {"executor": "process-pool", "died": True, "exit_codes": [-9]}
    assert [(a["reason"], a["status"], a["error"]) for a in attempts["doomed"]] == [
        ("worker died", "failed", dead["error"])
    ]


def test_jobs_is_refused_where_ray_or_torchrun_place_the_cells(tmp_path, monkeypatch, capsys):
    suite = write_suite(tmp_path / "s.yaml", SUITE.format(variants="[softmax]"))
    args = ["run", str(suite), "--store", str(tmp_path / "s.sqlite"), "--jobs", "2"]
    assert cli_main([*args, "--executor", "ray"]) == 2
    assert "--jobs 2 runs cells in a local process pool; Ray schedules the cells itself" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cli_main(args) == 2
    assert "under torchrun each cell trains across the torchrun processes" in capsys.readouterr().err
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(SystemExit):
        cli_main([*args[:-1], "0"])
    assert "'0' is not a number of workers" in capsys.readouterr().err
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything ran


def test_default_jobs_one_per_core_on_cpu_one_on_a_gpu(monkeypatch):
    monkeypatch.delenv("ATTNBENCH_JOBS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert default_jobs("cpu") == 3 and default_jobs("cuda") == 1
    monkeypatch.setenv("ATTNBENCH_JOBS", "2")
    assert default_jobs("cpu") == default_jobs("cuda") == 2
    monkeypatch.setenv("ATTNBENCH_JOBS", "many")
    with pytest.raises(ExecutorError, match="ATTNBENCH_JOBS='many' is not a number of workers"):
        default_jobs("cpu")
    assert isinstance(make_executor("local", jobs=2), ProcessPoolCellExecutor)
    assert isinstance(make_executor("local", jobs=1), InProcessExecutor)


def test_speed_cells_run_alone_in_the_driver_while_training_cells_use_the_pool(tmp_path):
    body = (
        SUITE.format(variants="[softmax]")
        + """
      - name: speed
        kind: speed
        variants: [softmax]
        speed: {lengths: [32], modes: [train_step], min_rounds: 2, max_time: 0.01, max_remeasure: 0}
"""
    )
    suite = write_suite(tmp_path / "pool.yaml", body)
    proc = run_cli(
        "run",
        str(suite),
        "--store",
        str(tmp_path / "s.sqlite"),
        "--jobs",
        "2",
        "--device",
        "cpu",
        "--no-report",
        env=PLUGINS,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Store(tmp_path / "s.sqlite") as store:
        runs = {(r["kind"], r["seed"]): r for r in store.runs()}
        train = [r for (kind, _), r in runs.items() if kind == "train"]
        speed = runs[("speed", 0)]
        trained_until = max(r["finished_at"] for r in train)
    assert {r["provenance"]["worker"]["executor"] for r in train} == {"process-pool"}
    assert speed["provenance"]["worker"]["executor"] == "in-process"  # timed with nothing else in flight
    assert speed["started_at"] >= trained_until
