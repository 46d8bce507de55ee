"""The `attnbench` command. Errors a user can act on are turned into one message here."""

from __future__ import annotations

import argparse
import sys

from attnbench.cli import (
    cmd_bench,
    cmd_check,
    cmd_checkpoints,
    cmd_docs,
    cmd_export,
    cmd_inspect,
    cmd_list,
    cmd_lm_eval,
    cmd_replicate,
    cmd_report,
    cmd_run,
    cmd_store,
    cmd_suites,
    cmd_validate,
)
from attnbench.errors import AttnbenchError

COMMANDS = (
    cmd_list,
    cmd_validate,
    cmd_run,
    cmd_replicate,
    cmd_check,
    cmd_bench,
    cmd_lm_eval,
    cmd_report,
    cmd_export,
    cmd_docs,
    cmd_store,
    cmd_inspect,
    cmd_suites,
    cmd_checkpoints,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnbench", description="Fair, reproducible comparisons of attention mechanisms."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AttnbenchError as exc:
        print(f"attnbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnbench: interrupted; finished cells are stored, run again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
