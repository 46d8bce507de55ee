"""`attnbench run SUITE`: run every cell not already in the store."""

from __future__ import annotations

import argparse
import sys

from ..runner import run_suite
from ..store import Store
from ..suite import load_suite
from .common import add_store_option, registry_with_warnings, split_names


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a suite; cells already stored are skipped")
    p.add_argument("suite", help="path to a suite YAML file")
    add_store_option(p)
    p.add_argument("--variants", help="comma-separated variants to run (default: the suite's)")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: the suite's, else auto)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite)
    registry = registry_with_warnings()
    with Store(args.store) as store:
        report = run_suite(suite, store, registry, device=args.device,
                           only_variants=split_names(args.variants))
    print(f"{suite.name}: {report.cells} cells, {report.ran} run, {report.skipped} already stored "
          f"(store: {args.store})")
    if report.not_done:
        print("cells that did not finish:\n  " + "\n  ".join(report.not_done), file=sys.stderr)
        return 1
    return 0
