"""`attnbench replicate SUITE`: train each decided row's chosen point again on fresh seeds, and
say whether every decision repeats.

It runs the suite with ``protocol.replicate`` set to seeds that took no part in choosing or
deciding (by default the next ones after every seed the experiment's cells in the store and its
suite use), so only the replication cells train: the rows already decided and their baseline,
at their chosen points. Then it prints each decision beside its replication: repeated,
undetermined on fresh seeds, not repeated or reversed."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnbench.cli.cmd_run import add_run_options, run
from attnbench.errors import SuiteError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "replicate",
        help="train each decided row again on fresh seeds and say whether its decision repeats",
    )
    add_run_options(p)
    p.add_argument(
        "--seeds",
        type=_seeds,
        metavar="A-B|A,B,...",
        help="the fresh seeds (default: as many as the experiment decides on, after every seed it used)",
    )
    p.set_defaults(func=replicate)


def _seeds(raw: str) -> list[int]:
    try:
        if "-" in raw:
            lo, hi = (int(x) for x in raw.split("-", 1))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        seeds = []
    if len(seeds) < 2 or len(set(seeds)) < len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not a set of at least 2 distinct seeds; give e.g. 12-17 or 12,13,14"
        )
    return seeds


def _used_seeds(store: Path, experiment: str) -> set[int]:
    """Every seed the store holds a cell of ``experiment`` for (replication rounds included)."""
    import sqlite3

    if not store.exists():
        return set()
    db = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {int(s) for (s,) in db.execute("SELECT DISTINCT seed FROM runs WHERE experiment = ?", (experiment,))}
    except sqlite3.Error:
        return set()
    finally:
        db.close()


def fresh_overrides(args: argparse.Namespace) -> list[str]:
    """``--set experiments.NAME.protocol.replicate=[...]`` for each train experiment that decides."""
    from attnbench.plan.specs import TrainExperiment
    from attnbench.plan.suite import load_suite

    suite = load_suite(args.suite, args.overrides)
    out = []
    for exp in suite.experiments:
        p = exp.protocol if isinstance(exp, TrainExperiment) else None
        if p is None or not p.interval:
            continue
        used = set(exp.seeds) | set(p.tuning.seeds if p.tuning else []) | set(p.replicate or [])
        used |= set(range(p.seeds.max)) if p.seeds is not None else set()
        used |= _used_seeds(Path(args.store), exp.name)
        if args.seeds is not None and used & set(args.seeds):
            raise SuiteError(
                f"--seeds {args.seeds} reuses seed(s) {sorted(used & set(args.seeds))} that experiment "
                f"{exp.name!r} already used; give seeds above {max(used)}"
            )
        count = p.seeds.min if p.seeds is not None else len(exp.seeds)
        seeds = args.seeds or list(range(max(used) + 1, max(used) + 1 + count))
        out.append(f"experiments.{exp.name}.protocol.replicate={seeds}")
    if not out:
        raise SuiteError(f"suite {args.suite!r} has no train experiment whose protocol decides: nothing to replicate")
    return out


def replicate(args: argparse.Namespace) -> int:
    from attnbench.plan.suite import load_suite

    args.overrides = [*args.overrides, *fresh_overrides(args)]
    name = load_suite(args.suite, args.overrides).name
    code = run(args)
    print("\n".join(replication_lines(Path(args.store), name)))
    return code


def replication_lines(store: Path, suite: str) -> list[str]:
    """Each decision of ``suite``'s rows in ``store`` with its replications, one line a row."""
    from attnbench.report.comparison import summary_table  # pandas loads only here
    from attnbench.report.load import load_store
    from attnbench.report.replication import DECIDED

    table = summary_table(load_store(store, suite))
    if table is None or table.data.empty:
        return [f"{suite}: no decided comparison in {store}"]
    lines = [f"{suite}: each decision and its replication on fresh seeds"]
    for _, r in table.data.iterrows():
        if r["decision"] not in DECIDED:
            continue
        where = r["experiment"] + ("" if r["setting"] == "all test sets" else f" @ {r['setting']}")
        lines.append(f"  {where}, {r['variant']}: {r['decision_text']} -> {r['replication_text']}")
    if len(lines) == 1:
        lines.append("  no row is decided (better, worse or equivalent): nothing to replicate")
    return lines
