"""scripts/recall_vs_state.py: the recall-against-state-size figure from a store (the README's)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

from scipy import stats

from tests.report_store import RECALL_TEST, STATE, SUITE, write_store

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "recall_vs_state.py"


def _run(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLCONFIGDIR": str(tmp / "mpl")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def _rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    """(variant, K) -> the printed row's other columns: lr edge accuracy lo hi seeds state_elements."""
    lines = stdout.splitlines()
    assert lines[0].split() == ["variant", "lr", "edge", "K", "accuracy", "lo", "hi", "seeds", "state_elements"]
    return {(cols[0], cols[3]): cols[1:3] + cols[4:] for cols in (line.split() for line in lines[1:])}


def test_draws_each_variant_at_its_chosen_rate_with_seed_intervals(tmp_path):
    store = write_store(tmp_path / "store.sqlite")
    common = [str(store), "--suite", SUITE, "--experiment", "recall"]
    out = tmp_path / "fig.png"
    done = _run(*common, "--out", str(out), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lr, edge, accuracy, lo, hi, seeds, state = _rows(done.stdout)[("linear", "16")]
    assert float(lr) == 0.001 and edge == "low"  # the lower validation loss, at the grid's low end
    values = RECALL_TEST["linear"][16]
    n = len(values)
    assert abs(float(accuracy) - statistics.fmean(values)) < 1e-6  # test rows, mean over the seeds
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / n**0.5  # a 95% t interval over the seeds
    assert (
        abs(float(lo) - (statistics.fmean(values) - half)) < 1e-5
        and abs(float(hi) - (statistics.fmean(values) + half)) < 1e-5
    )
    assert (int(seeds), int(state)) == (n, STATE["linear"] // 2)


def test_one_grid_point_for_every_variant_on_request(tmp_path):
    store = write_store(tmp_path / "store.sqlite")
    common = [str(store), "--suite", SUITE, "--experiment", "recall"]
    done = _run(*common, "--lr", "0.003", "--out", str(tmp_path / "f.png"), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    lr, _edge, accuracy, *_ = _rows(done.stdout)[("linear", "16")]
    expected = statistics.fmean(max(0.0, a - 0.3) for a in RECALL_TEST["linear"][16])  # the worse point, as asked
    assert float(lr) == 0.003 and abs(float(accuracy) - expected) < 1e-6
    missing = _run(*common, "--lr", "0.5", "--out", str(tmp_path / "g.png"), tmp=tmp_path)
    assert missing.returncode != 0 and "no runs at lr 0.5" in missing.stderr
