"""scripts/compare_summaries.py: two reports' findings side by side (the fp32 / bf16 comparison)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_summaries.py"
FIELDS = ["experiment", "setting", "variant", "value_mean", "value_lo", "value_hi", "decision", "chosen_point"]


def _report(folder: Path, rows: list[list[str]]) -> Path:
    (folder / "tables").mkdir(parents=True)
    with (folder / "tables" / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        w.writerows(rows)
    return folder


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_rows_pair_up_and_say_whether_intervals_overlap_and_decisions_match(tmp_path):
    a = _report(
        tmp_path / "a",
        [
            ["text", "all", "softmax", "2.09", "2.03", "2.16", "baseline", "lr=0.006"],
            ["text", "all", "linear", "2.23", "2.22", "2.24", "worse", "lr=0.006"],
        ],
    )
    b = _report(
        tmp_path / "b",
        [
            ["text", "all", "softmax", "2.10", "2.07", "2.14", "baseline", "lr=0.006"],
            ["text", "all", "linear", "2.40", "2.30", "2.50", "undetermined", "lr=0.012"],
        ],
    )
    done = _run(str(a), str(b), "--labels", "fp32,bf16")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| experiment | setting | variant | fp32 [95%] | bf16 [95%] | overlap |")
    linear = next(ln for ln in lines if "| linear |" in ln)
    assert "| NO | worse | undetermined | lr=0.006 / lr=0.012 |" in linear  # [2.22, 2.24] vs [2.30, 2.50]
    assert "| yes | baseline | baseline |" in next(ln for ln in lines if "| softmax |" in ln)
    assert lines[-1] == "1 of 2 rows: intervals overlap; 1 of 2: same decision"


def test_a_row_in_one_report_only_is_named_and_fails(tmp_path):
    a = _report(tmp_path / "a", [["text", "all", "softmax", "2.09", "2.03", "2.16", "baseline", "lr=0.006"]])
    b = _report(tmp_path / "b", [])
    done = _run(str(a), str(b))
    assert done.returncode == 1 and "only in A: text / all / softmax" in done.stderr
    missing = _run(str(a), str(tmp_path / "nope"))
    assert missing.returncode != 0 and "no summary table" in missing.stderr
