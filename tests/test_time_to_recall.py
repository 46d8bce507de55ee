"""scripts/time_to_recall.py: steps to a recall threshold from a store's curves, censored where never reached."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attnbench.store.database import Metric, Result, RunRecord
from tests.report_store import SUITE, record, write_store

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "time_to_recall.py"


def _run_with_curve(key: str, seed: int, accuracies: list[float]) -> RunRecord:
    run = record(
        key,
        "sweep",
        "train",
        "softmax",
        seed,
        {},
        {},
        {"steps": 100 * len(accuracies), "train_time_s": 9.0},
        [Result("accuracy", accuracies[-1], "", {"split": "test", "num_kv_pairs": 4})],
    )
    run.metrics.extend(
        Metric(100 * (i + 1), 1000 * (i + 1), float(i + 1), "val/accuracy", a) for i, a in enumerate(accuracies)
    )
    return run


def test_reports_the_first_step_at_the_threshold_and_censors_a_run_that_never_reaches_it(tmp_path):
    learned = _run_with_curve("learned", 0, [0.3, 0.95, 0.91])  # first reaches 0.9 at step 200
    stuck = _run_with_curve("stuck", 1, [0.3, 0.4, 0.5])
    store = write_store(tmp_path / "s.sqlite", extra=[learned, stuck])
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(store), "--suite", SUITE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if "| sweep |" in line]
    by_seed = {int(r[2]): [c.strip() for c in r] for r in rows}
    assert by_seed[0][4:6] == ["200", "2000"] and by_seed[0][-1] == "4:0.91"
    assert by_seed[1][4] == ">300" and by_seed[1][5] == "0"
