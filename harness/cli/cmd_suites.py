"""`attnbench suites [FOLDER]`: the suites shipped with attnbench, each runnable by name
(`attnbench run quick`), or those of a folder, with description and measured wall time."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnbench.plan.shipped import format_wall_time, list_suites, shipped_dir


def add_parser(sub) -> None:
    p = sub.add_parser("suites", help="list the shipped suites (run one by name: attnbench run quick)")
    p.add_argument("folder", nargs="?", help="list the suite files of this folder instead of the shipped ones")
    p.add_argument(
        "--json",
        action="store_true",
        help="print name, file, description and measured wall time (seconds) of each as JSON",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder) if args.folder else None
    suites = list_suites(folder)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": s.name,
                        "path": str(s.path),
                        "description": s.description,
                        "wall_time_s": s.wall_time_s,
                        "wall_time_note": s.wall_time_note,
                        "wall_time_over": s.wall_time_over,
                        "gpu": s.gpu,
                    }
                    for s in suites
                ],
                indent=2,
            )
        )
        return 0
    rows = [("suite", "wall time", "description")]
    rows += [(s.name, format_wall_time(s.wall_time_s, s.wall_time_over, s.gpu), s.description) for s in suites]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        print(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}")
    if folder is None:
        print(
            f"\nfiles: {shipped_dir()} (lm-eval tasks: {shipped_dir() / 'lm_eval_tasks'})\n"
            "run one by name (attnbench run quick, attnbench validate quick); copy its file to change it"
        )
    return 0
