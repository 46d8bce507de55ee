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
    p.add_argument(
        "--build",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="build every distinct model size once (no training; imports torch, a few seconds), as `run` "
        "does before its first cell, so a size a builder refuses is refused here (default); --no-build: "
        "torch-free, each size checked against the variants' declared constraints only",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnbench.experiments.registry import expand_checked
    from attnbench.plan.after_tuning import runnable
    from attnbench.plan.halving import planned_total
    from attnbench.plan.requirements import require_packages
    from attnbench.plan.size_check import stated_constraints
    from attnbench.plan.suite import load_suite
    from attnbench.plan.validation import check_suite

    suite = load_suite(args.suite, args.overrides)
    registry = registry_with_warnings()
    checked = check_suite(suite, registry, build=args.build)  # every problem, then every refused size
    planned = expand_checked(checked)
    sizes = checked.sizes  # lm_eval builds no model of its own
    total, cells = planned_total(suite, planned), runnable(planned)  # templates wait for tuning
    tuned = f"; {total} once successive halving has chosen" if total != len(cells) else ""
    shipped = "" if Path(args.suite).expanduser().is_file() else f" ({suite.path})"  # a shipped suite's name
    print(f"{args.suite}{shipped}: ok ({len(suite.experiments)} experiments, {len(cells)} cells{tuned})")
    how = "each built once" if args.build else "declared constraints hold; not built (--no-build)"
    print(f"model sizes: {len(sizes)} distinct ({how})")
    for line in stated_constraints(sizes, registry):
        print(f"  constraint {line}")
    try:
        require_packages(suite)
    except MissingPackageError as exc:  # the file is valid; this install cannot run it yet
        print(f"warning: {exc}", file=sys.stderr)
    return 0
