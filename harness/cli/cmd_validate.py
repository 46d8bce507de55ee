"""`attnbench validate SUITE`: check a suite against the schema and the installed
plugins before any compute is spent."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnbench.cli.common import registry_with_warnings
from attnbench.experiments.registry import expand_suite
from attnbench.plan.halving import planned_total
from attnbench.plan.suite import load_suite


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="validate a suite file without running it")
    p.add_argument("suite", help="a suite YAML file, or a shipped suite's name (quick; attnbench suites lists them)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite setting, validated like the file (repeatable): "
        "defaults.train.lr=1e-3, experiments.NAME.seeds=[0,1]",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite, args.overrides)
    cells = expand_suite(suite, registry_with_warnings())
    total = planned_total(suite, cells)
    tuned = f"; {total} once successive halving has chosen" if total != len(cells) else ""
    shipped = "" if Path(args.suite).expanduser().is_file() else f" ({suite.path})"  # a shipped suite's name
    print(f"{args.suite}{shipped}: ok ({len(suite.experiments)} experiments, {len(cells)} cells{tuned})")
    return 0
