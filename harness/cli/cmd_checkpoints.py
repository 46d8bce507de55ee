"""`attnbench checkpoints [--suite S] [--variant V] [--chosen]`: which '<cell key>.pt' file is
which run: variant, options, experiment, seed, grid point, key and path, and the protocol's
chosen runs marked.

    attnbench checkpoints --variant linear --chosen
    attnbench export --best linear --experiment text exported/
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.cli.common import add_store_option
from attnbench.errors import CheckpointError

if TYPE_CHECKING:  # the report modules (pandas) load inside run, not for --help
    from attnbench.report.checkpoints import CheckpointRow

COLUMNS = ("suite", "experiment", "variant", "options", "model", "seed", "grid point", "chosen", "key", "path")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "checkpoints",
        help="list the checkpoints runs kept: variant, options, seed, grid point, key, path",
        description="List the model checkpoints the store's runs kept (the '<cell key>.pt' files in the "
        "checkpoints folder beside the store), one line per run. The 'chosen' column marks the "
        "protocol's choice per variant: 'run' is the chosen run (its grid point has the "
        "lowest mean validation loss, and of that point's seeds it has the lowest; `attnbench "
        "export --best` exports it), 'point' another seed at the chosen point.",  # report.checkpoints' marks
    )
    add_store_option(p)
    p.add_argument("--suite", help="only this suite (default: every suite in the store)")
    p.add_argument("--variant", help="only this variant")
    p.add_argument("--chosen", action="store_true", help="only the runs at each variant's chosen grid point")
    p.set_defaults(func=run)


def _cells(row: CheckpointRow) -> tuple[str, ...]:
    from attnbench.report.values import MISSING, point_text

    options = ", ".join(f"{k}={v}" for k, v in sorted(row.options.items())) or MISSING
    path = str(row.path) if row.path is not None else f"{row.recorded} (missing)"
    return (
        row.suite,
        row.experiment,
        row.variant,
        options,
        row.model,
        MISSING if row.seed is None else str(row.seed),
        point_text(row.point),
        row.chosen or MISSING,
        row.key,
        path,
    )


def _table(rows: list[CheckpointRow]) -> str:
    lines = [COLUMNS, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)), line[-1]]) for line in lines
    )


def run(args: argparse.Namespace) -> int:
    from attnbench.report.checkpoints import checkpoint_rows
    from attnbench.report.load import load_store

    first = load_store(Path(args.store), args.suite)
    suites = [args.suite] if args.suite else first.suites
    rows = [r for s in suites for r in checkpoint_rows(first if s == first.suite else load_store(Path(args.store), s))]
    if args.variant is not None:
        variants = sorted({r.variant for r in rows})
        if args.variant not in variants:
            close = difflib.get_close_matches(args.variant, variants, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CheckpointError(
                f"no checkpoints of variant {args.variant!r} in {args.store}{hint}; variants "
                f"with checkpoints: {', '.join(variants) or 'none'}"
            )
        rows = [r for r in rows if r.variant == args.variant]
    if args.chosen:
        rows = [r for r in rows if r.chosen]
    if not rows:
        print(
            f"no checkpoints in {args.store}"
            + (f" (suite {args.suite})" if args.suite else "")
            + (" at a chosen point" if args.chosen else "")
            + ": train runs keep one when they finish with train.checkpoint: true (the default)"
        )
        return 0
    print(_table(rows))
    missing = sum(r.path is None for r in rows)
    if missing:
        print(
            f"{missing} checkpoint file(s) missing: the checkpoints folder beside the store was moved or "
            "deleted; re-train those cells to have them again"
        )
    return 0
