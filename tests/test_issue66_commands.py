"""Issue 66, commands: a refused `attnbench bench` creates nothing; scripts/gpu_check.sh reads a
relative OUT against the caller's folder, not the checkout's."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"


def test_bench_refused_for_a_bad_heap_setting_creates_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "ATTNBENCH_HEAP": "bogus", "ATTNBENCH_PLUGINS": "softmax"}
    proc = subprocess.run(
        ["attnbench", "bench", "--variants", "softmax", "--lengths", "32", "--device", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode != 0 and "ATTNBENCH_HEAP" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # before: ./results/attnbench.sqlite


def _fake_python(tmp_path: Path) -> Path:
    """A PYTHON for the script that notes its arguments and fails: the script stops at its first call."""
    fake = tmp_path / "fake-python"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "args.txt"}\nexit 3\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_gpu_check_reads_a_relative_out_against_the_callers_folder(tmp_path: Path) -> None:
    caller = tmp_path / "caller"
    caller.mkdir()
    env = {**os.environ, "PYTHON": str(_fake_python(tmp_path))}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "gc-out", "--dry-run"], capture_output=True, text=True, env=env, cwd=caller, timeout=60
    )
    assert proc.returncode == 3
    first = (tmp_path / "args.txt").read_text().split()
    assert first[:3] == ["-m", "benchmarks.gpu_check", str(caller / "gc-out")]  # before: gc-out, under the checkout


def test_gpu_check_keeps_an_absolute_out_and_options_first(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": str(_fake_python(tmp_path))}
    for args in (["/abs/out", "--dry-run"], ["--dry-run", "x"]):
        (tmp_path / "args.txt").unlink(missing_ok=True)
        subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert (tmp_path / "args.txt").read_text().split()[2:4] == args
