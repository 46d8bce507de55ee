"""scripts/recall_vs_state.py: the recall-against-state-size figure from a store (the README's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.report_store import RECALL_TEST, STATE, SUITE, write_store

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "recall_vs_state.py"


def _run(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLCONFIGDIR": str(tmp / "mpl")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_draws_each_variants_accuracy_against_its_state_at_one_grid_point(tmp_path):
    store = write_store(tmp_path / "store.sqlite")
    common = [str(store), "--suite", SUITE, "--experiment", "recall"]
    grid = _run(*common, "--out", str(tmp_path / "f.png"), tmp=tmp_path)
    assert grid.returncode != 0 and "learning-rate grid" in grid.stderr and "--lr" in grid.stderr
    out = tmp_path / "fig.png"
    done = _run(*common, "--lr", "0.001", "--out", str(out), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in done.stdout.splitlines()[1:]}
    accuracy, seeds, state = rows[("linear", "16")]
    assert abs(float(accuracy) - sum(RECALL_TEST["linear"][16]) / 3) < 1e-6  # test rows, mean over the 3 seeds
    assert (int(seeds), int(state)) == (3, STATE["linear"] // 2)
