"""`attnbench validate SUITE`: check a suite against the schema and the installed
plugins before any compute is spent."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnbench.cli.common import add_suite_arguments, registry_with_warnings
from attnbench.errors import MissingPackageError


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="validate a suite file without running it")
    add_suite_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnbench.experiments.registry import expand_suite
    from attnbench.plan.halving import planned_total
    from attnbench.plan.requirements import require_packages
    from attnbench.plan.suite import load_suite

    suite = load_suite(args.suite, args.overrides)
    cells = expand_suite(suite, registry_with_warnings())
    total = planned_total(suite, cells)
    tuned = f"; {total} once successive halving has chosen" if total != len(cells) else ""
    shipped = "" if Path(args.suite).expanduser().is_file() else f" ({suite.path})"  # a shipped suite's name
    print(f"{args.suite}{shipped}: ok ({len(suite.experiments)} experiments, {len(cells)} cells{tuned})")
    try:
        require_packages(suite)
    except MissingPackageError as exc:  # the file is valid; this install cannot run it yet
        print(f"warning: {exc}", file=sys.stderr)
    return 0
