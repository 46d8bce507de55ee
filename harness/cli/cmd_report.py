"""`attnbench report`: the comparison report of one suite, generated from the store only."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnbench.cli.common import add_store_option


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="write the HTML and Markdown report of a suite from the store")
    p.add_argument("--suite", help="suite name (default: the suite of the most recent run)")
    add_store_option(p)
    p.add_argument(
        "--out", help="output folder (default: reports/<suite>/ beside the store, i.e. results/reports/<suite>/)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnbench.report import write_report  # pandas and seaborn load only for this command

    index = write_report(Path(args.store), args.suite, Path(args.out) if args.out else None)
    print(index)
    return 0
