"""Options and helpers shared by several commands. Light to import: every command's parser
is built for `attnbench --help`, so torch and the like load only inside a command's run."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from attnbench.errors import UsageError
from attnbench.store.database import DEFAULT_STORE

if TYPE_CHECKING:
    from attnbench.registry.loader import Registry


def add_store_option(parser: argparse.ArgumentParser, what: str = "results store") -> None:
    parser.add_argument(
        "--store",
        default=str(DEFAULT_STORE),
        help=f"{what} (SQLite file; default {DEFAULT_STORE}, relative to the current folder)",
    )


def add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite (a file or a shipped suite's name) and its ``--set`` overrides, as run and validate take them."""
    parser.add_argument(
        "suite", help="a suite YAML file, or a shipped suite's name (quick; attnbench suites lists them)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite setting, validated like the file (repeatable): "
        "defaults.train.lr=1e-3, experiments.NAME.seeds=[0,1]",
    )


def registry_with_warnings() -> Registry:
    """Load plugins; a plugin that failed to load is reported and the others still load."""
    from attnbench.registry.loader import load_registry  # imports the plugins, and with them torch

    registry = load_registry()
    for err in registry.errors:
        print(f"attnbench: warning: plugin {err.plugin!r} failed to load: {err.error}", file=sys.stderr)
    return registry


def split_names(raw: str | None, option: str = "--variants", example: str = "softmax,linear") -> list[str] | None:
    """Comma-separated names; None when the option is not given. Given but naming nothing
    (``--variants ""``) is an error naming ``example``: it would otherwise silently mean "every one"."""
    if raw is None:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names:
        raise UsageError(
            f"{option} {raw!r} names nothing; give comma-separated names (e.g. {option} {example}) "
            "or leave the option out to run every one"
        )
    return names


def positive_int(raw: str) -> int:
    """An argparse type: a whole number above 0 (argparse names the option in its error)."""
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number; give one above 0") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{raw} must be above 0")
    return value


def positive_seconds(raw: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{raw} must be a finite number of seconds above 0")
    return value
