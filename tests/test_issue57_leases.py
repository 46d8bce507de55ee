"""Issue 57 item 4: two drivers on one store never train the same cell. A driver claims a cell
in the store (a lease: owner pid, host, start) before training it; a second driver takes other
cells, or waits for the leased ones to be stored."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from attnbench.store import leases
from attnbench.store.database import RunRecord, Store
from tests.helpers import REPO, drivers, write_suite

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _suite(name: str, seeds: list[int], steps: int) -> str:
    return f"""
    version: 1
    name: {name}
    experiments:
      - name: cells
        kind: train
        variants: [softmax]
        data: {{source: builtin, max_bytes: 60000}}
        models: [{{d_model: 32, n_layer: 2, n_head: 2}}]
        train: {{batch_size: 4, seq_len: 64, budget: {{steps: {steps}}}, eval_interval: {steps},
                eval_tokens: 256, log_interval: 5, checkpoint: false}}
        seeds: {seeds}
    """


def _ran(proc: subprocess.CompletedProcess) -> int:
    """Cells this driver trained, from its closing line ('N cells, K run, M already stored')."""
    found = re.search(r"(\d+) cells, (\d+) run, (\d+) already stored", proc.stdout)
    assert found, proc.stdout + proc.stderr[-2000:]
    return int(found.group(2))


def test_two_drivers_on_one_store_train_each_cell_once(tmp_path):
    store_path = tmp_path / "store.sqlite"
    prime = write_suite(tmp_path / "prime.yaml", _suite("prime", [99], 2))
    (first,) = drivers(1, prime, store_path, "--jobs", "1")  # the trust gate's verdict, cached for both drivers
    assert first.returncode == 0, first.stderr[-3000:]
    seeds = list(range(8))
    suite = write_suite(tmp_path / "shared.yaml", _suite("shared", seeds, 40))
    procs = drivers(2, suite, store_path, "--jobs", "1")
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
    ran = [_ran(p) for p in procs]
    assert sum(ran) == len(seeds), f"trainings per driver {ran} for {len(seeds)} cells: a cell trained twice"
    assert all(ran), f"one driver trained every cell ({ran}): the drivers did not share the work"
    with Store(store_path) as store:
        runs = store.runs(suite="shared")
        assert sorted(r["seed"] for r in runs) == seeds
        assert all(r["status"] == "done" for r in runs)
        keys = {r["cell_key"] for r in runs}
        taken = [lease for lease in store.leases() if lease["cell_key"] in keys]
        per_cell = {key: [lease for lease in taken if lease["cell_key"] == key] for key in keys}
        assert all(len(ls) == 1 for ls in per_cell.values()), {k[:8]: len(v) for k, v in per_cell.items()}
        assert all(lease["ending"] == "stored" and lease["ended_at"] is not None for lease in taken)
        assert len({lease["pid"] for lease in taken}) == 2  # both drivers trained, each its own cells
        assert {lease["host"] for lease in taken} == {socket.gethostname()}


def _record(key: str) -> RunRecord:
    return RunRecord(key, "s", "e", "train", "softmax", "done", 0, {}, {}, {}, {}, 0.0, 1.0)


def _lease_of(store: Store, key: str) -> dict:
    (held,) = [lease for lease in store.leases(key) if lease["ended_at"] is None]
    return held


def test_a_lease_of_a_live_process_is_respected_and_of_a_gone_one_expires(tmp_path):
    path = tmp_path / "s.sqlite"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, time; from attnbench.store.database import Store; s = Store({str(path)!r}); "
            "print(s.claim('k'), flush=True); sys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == leases.CLAIMED
        with Store(path) as store:
            got = store.claim("k")
            assert isinstance(got, leases.Holder) and got.pid == holder.pid, got
            assert store.claim("other") == leases.CLAIMED  # the second driver takes other cells
            holder.kill()  # gone without letting go of its lease
            holder.wait()
            assert store.claim("k") == leases.CLAIMED  # same host, pid gone: expired and taken over
            history = store.leases("k")
            assert [h["ending"] for h in history] == ["expired", None]
            assert [h["pid"] for h in history] == [holder.pid, os.getpid()]
            store.save_run(_record("k"))
            assert _lease_of(store, "other")["pid"] == os.getpid()
            assert store.leases("k")[-1]["ending"] == "stored"  # ended with the cell's rows
            assert store.claim("k") == leases.STORED
        with Store(path) as store:  # closing let go of the lease of "other", never stored
            assert store.leases("other")[-1]["ending"] == "released"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_reused_pid_and_another_hosts_stale_heartbeat_expire(tmp_path, monkeypatch):
    with Store(tmp_path / "s.sqlite") as store:
        me = leases.me()
        now = time.time()
        rows = [
            # this very process, but started at another time: its pid was reused
            ("reused", os.getpid(), me.host, me.machine, "1", now),
            ("fresh", 1, "elsewhere", "other-machine", "5", now),  # another machine, heartbeat now
            ("stale", 1, "elsewhere", "other-machine", "5", now - leases.LEASE_TIMEOUT_S - 1),
        ]
        for key, pid, host, machine, start, beat in rows:
            store._db.execute(
                "INSERT INTO leases (cell_key, pid, host, machine, process_start, started_at, heartbeat_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, pid, host, machine, start, beat, beat),
            )
        if me.process_start:  # Linux: the start time tells a reused pid
            assert store.claim("reused") == leases.CLAIMED
        got = store.claim("fresh")
        assert isinstance(got, leases.Holder) and got.host == "elsewhere"
        assert store.claim("stale") == leases.CLAIMED
        assert store.leases("stale")[0]["ending"] == "expired"


def test_a_cell_another_driver_stored_as_failed_during_this_run_is_not_run_again(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        since = time.time()
        failed = _record("k")
        failed.status, failed.error, failed.started_at, failed.finished_at = "failed", "boom", since, since + 1
        store.save_run(failed)
        assert store.claim("k", retry_failed=True, since=since) == leases.STORED  # stored during this run
        assert store.claim("k", retry_failed=True, since=since + 5) == leases.CLAIMED  # a failure of before


@pytest.mark.parametrize("beat", [0.05])
def test_the_holder_renews_its_heartbeat(tmp_path, monkeypatch, beat):
    monkeypatch.setattr(leases, "HEARTBEAT_S", beat)
    with Store(tmp_path / "s.sqlite") as store:
        assert store.claim("k") == leases.CLAIMED
        first = _lease_of(store, "k")["heartbeat_at"]
        deadline = time.time() + 10
        while _lease_of(store, "k")["heartbeat_at"] == first and time.time() < deadline:
            time.sleep(beat)
        assert _lease_of(store, "k")["heartbeat_at"] > first


def test_a_driver_waits_for_a_leased_cell_and_takes_it_over_when_its_holder_dies(tmp_path, registry):
    from attnbench.plan.suite import load_suite
    from attnbench.run.runner import prepare_run

    store_path = tmp_path / "store.sqlite"
    (first,) = drivers(1, write_suite(tmp_path / "prime.yaml", _suite("prime", [99], 2)), store_path, "--jobs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    suite_path = write_suite(tmp_path / "held.yaml", _suite("held", [0, 1, 2], 4))
    cells = prepare_run(load_suite(suite_path), registry, device="cpu")
    held = next(c.key for c in cells if c.seed == 0)
    holder = subprocess.Popen(  # another driver's lease on seed 0, its cell still training
        [
            sys.executable,
            "-c",
            f"import sys; from attnbench.store.database import Store; s = Store({str(store_path)!r}); "
            f"print(s.claim({held!r}), flush=True); sys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cmd = ["attnbench", "run", str(suite_path), "--store", str(store_path), "--device", "cpu", "--no-report"]
    env = {**os.environ, **OFFLINE, "ATTNBENCH_PLUGINS": "softmax", "OMP_NUM_THREADS": "1", "ATTNBENCH_JOBS": "1"}
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == leases.CLAIMED
        driver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        deadline = time.time() + 300
        while time.time() < deadline:  # it trains the other two cells, then waits
            with Store(store_path) as store:
                if len(store.runs(suite="held")) == 2:
                    break
            time.sleep(0.5)
        time.sleep(3)
        with Store(store_path) as store:
            assert not store.has_run(held) and driver.poll() is None  # it waits; it does not train the held cell
        holder.kill()  # the holder dies without storing its cell: the driver takes it over
        holder.wait()
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        for proc in (holder,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert driver.returncode == 0, stderr[-3000:]
    assert f"waiting for 1 cell(s) that another driver is training (process {holder.pid} on" in stderr
    assert "3 cells, 3 run, 0 already stored" in stdout
    with Store(store_path) as store:
        assert sorted(r["seed"] for r in store.runs(suite="held")) == [0, 1, 2]
        history = store.leases(held)
        assert [(h["pid"], h["ending"]) for h in history] == [(holder.pid, "expired"), (driver.pid, "stored")]
