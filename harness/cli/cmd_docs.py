"""`attnbench docs`: regenerate the suite reference and the suite JSON Schema from the
models (the files committed under docs/; a test fails when they drift)."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("docs", help="write the suite reference (Markdown) and JSON Schema from the models")
    p.add_argument("--out", default="docs", help="folder to write into (default: docs)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnbench.plan.reference import write_docs

    for path in write_docs(args.out):
        print(f"wrote {path}")
    return 0
