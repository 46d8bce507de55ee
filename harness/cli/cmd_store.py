"""`attnbench store merge OUT IN...` and `attnbench store check FILE`: stores written on
several machines joined into one, and a store's integrity checked on demand."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnbench.errors import StoreError
from attnbench.store.merge import check_store, merge_stores


def add_parser(sub) -> None:
    p = sub.add_parser("store", help="merge results stores, or check one's integrity")
    cmds = p.add_subparsers(dest="store_command", required=True, metavar="STORE_COMMAND")
    m = cmds.add_parser("merge", help="merge stores IN... into OUT (inputs are not modified)")
    m.add_argument("out", help="the merged store (created if missing)")
    m.add_argument("inputs", nargs="+", metavar="IN", help="stores to merge in")
    m.set_defaults(func=merge)
    c = cmds.add_parser("check", help="run SQLite's integrity check and the schema check on a store")
    c.add_argument("file", help="a results store")
    c.set_defaults(func=check)


def merge(args: argparse.Namespace) -> int:
    r = merge_stores(Path(args.out), [Path(p) for p in args.inputs])
    print(
        f"{args.out}: {r.added} cells added, {r.duplicates} already there, {len(r.conflicts)} in conflict "
        f"(both results kept; see the report's attempts), {r.attempts} attempts, {r.checks} gate verdicts"
    )
    return 0


def check(args: argparse.Namespace) -> int:
    if not Path(args.file).is_file():
        raise StoreError(f"no results store at {args.file}; pass the SQLite file")
    problems = check_store(Path(args.file))
    if problems:
        raise StoreError(
            f"{args.file} failed its checks:\n  "
            + "\n  ".join(problems)
            + f"\nRestore it from a backup, or salvage it with `sqlite3 {args.file} .recover`."
        )
    print(f"{args.file}: ok (integrity and schema)")
    return 0
