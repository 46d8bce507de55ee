"""Two reports' first-screen findings side by side: the same suite run twice (fp32 against
bf16, two machines, two code versions), row by row from each report's tables/summary.csv.

    python scripts/compare_summaries.py A/reports/quick B/reports/quick [--labels fp32,bf16]

Per experiment, setting and variant: the test metric's mean over seeds with its 95% interval,
the decision against the baseline and the chosen grid point in each run, and whether the two
intervals overlap (the findings agree within their intervals) and the decisions match.
Exits 1 when a row is in one report only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

KEY = ("experiment", "setting", "variant")


def _rows(report: Path) -> dict[tuple[str, ...], dict[str, str]]:
    path = report / "tables" / "summary.csv"
    if not path.exists():
        raise SystemExit(
            f"{path}: no summary table; pass a report folder (reports/<suite>) written by attnbench report"
        )
    with path.open(newline="") as f:
        return {tuple(r[k] for k in KEY): r for r in csv.DictReader(f)}


def _interval(r: dict[str, str]) -> tuple[float, float, float]:
    return float(r["value_mean"]), float(r["value_lo"] or r["value_mean"]), float(r["value_hi"] or r["value_mean"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--labels", default="A,B", help="names of the two runs (default A,B)")
    args = ap.parse_args()
    la, lb = args.labels.split(",")
    a, b = _rows(args.a), _rows(args.b)
    only = sorted(set(a) ^ set(b))
    head = f"{la} [95%] | {lb} [95%] | overlap | {la} decision | {lb} decision | chosen {la} / {lb}"
    print(f"| experiment | setting | variant | {head} |")
    print("|---|---|---|---|---|---|---|---|---|")
    agree = same = 0
    for key in sorted(set(a) & set(b)):
        (ma, loa, hia), (mb, lob, hib) = _interval(a[key]), _interval(b[key])
        overlap = loa <= hib and lob <= hia
        agree += overlap
        da, db = a[key]["decision"], b[key]["decision"]
        same += da == db
        print(
            f"| {' | '.join(key)} | {ma:.3f} [{loa:.3f}, {hia:.3f}] | {mb:.3f} [{lob:.3f}, {hib:.3f}] | "
            f"{'yes' if overlap else 'NO'} | {da} | {db} | {a[key]['chosen_point']} / {b[key]['chosen_point']} |"
        )
    n = len(set(a) & set(b))
    print(f"\n{agree} of {n} rows: intervals overlap; {same} of {n}: same decision")
    for key in only:
        print(f"only in {la if key in a else lb}: {' / '.join(key)}", file=sys.stderr)
    return 1 if only else 0


if __name__ == "__main__":
    raise SystemExit(main())
