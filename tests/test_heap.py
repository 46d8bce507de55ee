"""The C heap of a training process keeps what a step frees (issue 42): glibc takes the
setting, every cell records what its process ran with, and a bad ATTNBENCH_HEAP stops a run
before anything trains."""

from __future__ import annotations

import json
import platform

import pytest

from attnbench.cli import main
from attnbench.run.heap import HEAP_ENV, heap_record
from attnbench.store.database import Store
from tests.helpers import python, tiny_train_suite, write_suite

# A fresh process, as a worker is: what it runs with once it has asked, and that it asked once.
ASK = """
import json
from attnbench.run.heap import heap_record, keep_freed_heap
before = heap_record()
first = keep_freed_heap()
print(json.dumps({"before": before, "first": first, "again": keep_freed_heap() is first}))
"""

GLIBC = platform.libc_ver()[0] == "glibc"


def _ask(setting: str) -> dict:
    done = python(ASK, env={HEAP_ENV: setting})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not GLIBC, reason="the heap setting applies to glibc's malloc only")
def test_glibc_takes_the_kept_heap_settings_and_system_leaves_them():
    """mallopt accepted both values (the record says keep only when glibc answered 1 to each); the
    speed they buy is a benchmark's to show (benchmarks/bench_mixers.py prints faults per step)."""
    kept, system = _ask("keep"), _ask("system")
    assert kept["before"] == {"heap": "system", "why": "not set in this process"}
    assert kept["first"]["heap"] == "keep" and kept["again"]
    assert kept["first"]["mallopt"] == {"M_MMAP_THRESHOLD": 32 << 20, "M_TRIM_THRESHOLD": 1 << 30}
    assert system["first"] == {"heap": "system", "why": f"{HEAP_ENV}=system"}


SUITE = tiny_train_suite("heap-check")


def test_every_cell_records_the_heap_its_process_ran_with(tmp_path):
    store = tmp_path / "s.sqlite"
    assert main(["run", str(write_suite(tmp_path / "s.yaml", SUITE)), "--store", str(store), "--no-report"]) == 0
    with Store(store) as opened:
        [run] = opened.runs(suite="heap-check")
    assert run["provenance"]["heap"] == heap_record()
    assert run["provenance"]["heap"]["heap"] == ("keep" if GLIBC else "system")


def test_a_bad_heap_setting_stops_the_run_before_anything_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(HEAP_ENV, "huge")
    store = tmp_path / "s.sqlite"
    code = main(["run", str(write_suite(tmp_path / "s.yaml", SUITE)), "--store", str(store), "--no-report"])
    err = capsys.readouterr().err
    assert code != 0 and f"{HEAP_ENV}='huge': expected one of keep, system" in err
    if store.exists():
        with Store(store) as opened:
            assert opened.runs() == []
