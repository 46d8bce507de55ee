"""`attnbench bench`: a quick speed sweep of chosen variants without writing a suite.

Builds a one-experiment `speed` suite in memory and runs it through the normal runner,
so the points land in the store (and an unchanged re-run reuses them); then prints the
median time and peak memory per length, the fitted log-log slopes and the crossover
length against softmax.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnbench.cli.common import add_store_option, registry_with_warnings, split_names
from attnbench.errors import SuiteError

if TYPE_CHECKING:  # the modules themselves load inside the functions (torch: not for --help)
    from attnbench.plan.cells import Cell
    from attnbench.plan.suite import Suite
    from attnbench.store.database import Store

STATUS_MARK = {"oom": "OOM", "timeout": "timeout", "error": "error", "skipped": "-"}


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="quick time/memory sweep against sequence length (no suite file)")
    p.add_argument("--variants", help="comma-separated variants (default: all registered)")
    lengths = p.add_mutually_exclusive_group()
    lengths.add_argument("--lengths", help="comma-separated sequence lengths, e.g. 256,512,1024")
    lengths.add_argument(
        "--max-T", dest="max_T", type=int, default=2048, help="double from --min-T up to this length (default 2048)"
    )
    p.add_argument("--min-T", dest="min_T", type=int, default=256, help="first length of the doubling grid")
    p.add_argument(
        "--modes",
        default="forward,train_step",
        help="comma-separated of forward, train_step, decode (default forward,train_step)",
    )
    add_store_option(p)
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: auto)")
    p.add_argument("--d-model", dest="d_model", type=int, default=128)
    p.add_argument("--n-layer", dest="n_layer", type=int, default=2)
    p.add_argument("--n-head", dest="n_head", type=int, default=4)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=1)
    p.add_argument(
        "--time-limit",
        dest="time_limit",
        type=float,
        default=60.0,
        help="seconds one isolated point may take (process start, setup, one call)",
    )
    p.add_argument("--min-rounds", dest="min_rounds", type=int, default=3)
    p.add_argument(
        "--max-time",
        dest="max_time",
        type=float,
        default=0.5,
        help="pytest-benchmark seconds of rounds per point when calls are fast",
    )
    p.add_argument("--fit-min-T", dest="fit_min_T", type=int, default=0, help="fit slopes over T >= this")
    p.add_argument("--threads", type=int, help="CPU threads for the timed code (default: torch's)")
    p.add_argument("--compile", action="store_true", help="torch.compile forward and train_step points (recorded)")
    p.set_defaults(func=run)


def _ints(raw: str) -> list[int]:
    try:
        return [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SuiteError(f"--lengths takes comma-separated integers, got {raw!r}") from None


def bench_suite(args: argparse.Namespace) -> Suite:
    from pydantic import ValidationError

    from attnbench.plan.suite import Suite

    speed: dict[str, Any] = {
        "modes": split_names(args.modes, "--modes", "forward,decode") or [],
        "batch_size": args.batch_size,
        "time_limit_s": args.time_limit,
        "min_rounds": args.min_rounds,
        "max_time": args.max_time,
        "fit_T_min": args.fit_min_T,
    }
    if args.threads:
        speed["threads"] = args.threads
    if args.compile:
        speed["compile"] = True
    if args.lengths:
        speed["lengths"] = _ints(args.lengths)
    else:
        speed.update(T_min=args.min_T, T_max=args.max_T)
    raw = {
        "version": 1,
        "name": "bench",
        "description": "attnbench bench",
        "device": args.device or "auto",
        "experiments": [
            {
                "name": "bench",
                "kind": "speed",
                "variants": split_names(args.variants) or "all",
                "models": [{"d_model": args.d_model, "n_layer": args.n_layer, "n_head": args.n_head}],
                "speed": speed,
            }
        ],
    }
    try:
        return Suite.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{e['loc'][-1]}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise SuiteError(f"invalid bench options: {problems}") from None


def _fmt_time(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _fmt_bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _points(store: Store, run_id: int) -> dict[tuple[str, str], dict[int, tuple[float | None, str]]]:
    out: dict[tuple[str, str], dict[int, tuple[float | None, str]]] = {}
    for r in store.results(run_id):
        if r["name"] in ("time_s", "peak_memory_bytes"):
            out.setdefault((r["tags"]["mode"], r["name"]), {})[int(r["tags"]["T"])] = (r["value"], r["tags"]["status"])
    return out


def _point_text(point: tuple[float | None, str] | None, fmt: Callable[[float], str]) -> str:
    """A table entry: the value of an ok point, else its status mark; blank where none was stored."""
    if point is None:
        return ""
    value, status = point
    return fmt(value) if status == "ok" and value is not None else STATUS_MARK.get(status, "?")


def render(store: Store, cells: list[Cell], device: str) -> str:
    """Time and memory tables with slopes and crossovers, from the stored cells."""
    from attnbench.experiments.speed.fits import BASELINE, curves_by_model, fit_results, stored_baseline
    from attnbench.plan.speed_spec import SpeedSpec

    runs = {r["cell_key"]: r for r in store.runs(suite=cells[0].suite, kind="speed")}
    mine = [(c, runs[c.key]) for c in cells if c.key in runs]
    if not mine:
        return "no stored speed runs for these settings"
    base = [r for c, r in mine if c.variant == BASELINE] or stored_baseline(store, cells)
    base_curves = curves_by_model(store, base).get(0)
    spec = cells[0].spec_as(SpeedSpec)
    lengths = sorted({T for m in spec.modes for T in spec.sweep(m)})
    out = []
    for name, label, fmt, quantity in (
        ("time_s", "median time per call (decode: per token)", _fmt_time, "time"),
        ("peak_memory_bytes", "peak memory added by one call", _fmt_bytes, "memory"),
    ):
        rows = [
            ["variant", "mode", *[f"T={T}" for T in lengths], "slope", "95% CI", "fit T"]
            + (["crossover vs softmax"] if quantity == "time" else [])
        ]
        for cell, run in mine:
            points = _points(store, run["id"])
            curves = curves_by_model(store, [run])[0]
            fits = fit_results(curves, base_curves, spec.fit_T_min, device, with_crossover=cell.variant != BASELINE)
            for mode in spec.modes:
                pts = points.get((mode, name), {})
                cols = [_point_text(pts.get(T), fmt) for T in lengths]
                slope = next(
                    r for r in fits if r.name == "slope" and r.tags["mode"] == mode and r.tags["quantity"] == quantity
                )
                ci = slope.tags["ci95"]
                row = [
                    cell.variant,
                    mode,
                    *cols,
                    f"{slope.value:.2f}" if slope.value is not None else f"no fit ({slope.tags['n_points']} pts)",
                    f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "",
                    f"{slope.tags['T_min']}-{slope.tags['T_max']}" if slope.value is not None else "",
                ]
                if quantity == "time":
                    cx = next((r for r in fits if r.name == "crossover_T" and r.tags["mode"] == mode), None)
                    row.append(
                        "baseline"
                        if cx is None
                        else f"T={cx.value} ({cx.tags['status']})"
                        if cx.value is not None
                        else cx.tags["status"]
                    )
                rows.append(row)
        out.append(f"{label}:\n{_table(rows)}")
    cell = cells[0]
    head = (
        f"device {device}, d_model {cell.model.d_model} x {cell.model.n_layer} layers, "
        f"{cell.model.n_head} heads, batch {spec.batch_size}"
    )
    return head + "\n\n" + "\n\n".join(out)


def run(args: argparse.Namespace) -> int:
    from attnbench.experiments.registry import expand_suite
    from attnbench.run.runner import prepare_run, run_suite
    from attnbench.store.database import Store
    from attnbench.store.provenance import device_name, resolve_device

    suite = bench_suite(args)
    registry = registry_with_warnings()
    dev = resolve_device(args.device or suite.device)
    planned = prepare_run(suite, registry, device=args.device)  # every refusal (ATTNBENCH_HEAP, ...) creates nothing
    with Store(args.store) as store:
        report = run_suite(suite, store, registry, device=args.device, cells=planned)
        cells = expand_suite(suite, registry, device=device_name(dev), corpus_hash=lambda spec: "")
        print(render(store, cells, device_name(dev)))
    print(f"\n{report.cells} cells, {report.ran} run, {report.skipped} already stored (store: {args.store})")
    return 1 if report.not_done else 0
