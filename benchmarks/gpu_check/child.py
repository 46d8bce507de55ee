"""One step of the GPU check, in a process of its own (the driver time-boxes it): the
attnbench command the step stands for, run in-process through attnbench's own entry point,
then the step's figures read back from the store into steps/<step>.json.

    python -m benchmarks.gpu_check.child STEP OUT [--dry-run] [--figures-only]

``--figures-only`` reads what a timed-out step left in the store, without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.gpu_check.layout import Layout
from benchmarks.gpu_check.plan import SUITE_NAME, Sizes, sizes

if TYPE_CHECKING:
    from attnbench.store.database import Store

Figures = dict[str, Any]


def attnbench(*argv: str) -> int:
    """`attnbench ARGV` through its console entry point, in this process; its exit status."""
    from attnbench.cli import main

    print(f"$ attnbench {' '.join(argv)}", flush=True)
    try:
        return int(main(list(argv)) or 0)
    except SystemExit as exc:  # argparse refusing the arguments
        return exc.code if isinstance(exc.code, int) else 2


def _open(lay: Layout) -> Store:
    from attnbench.store.database import Store

    return Store(lay.store)


def _variants(lay: Layout) -> list[str]:
    return list(json.loads(lay.step_json("env").read_text())["figures"]["run_variants"])


def _run(lay: Layout, s: Sizes, *experiments: str) -> int:
    store, jobs = ("--store", str(lay.store)), ("--jobs", "1")
    exps = ("--experiments", ",".join(experiments))
    return attnbench("run", str(lay.suite), *store, *exps, "--device", s.device, *jobs, "--no-report")


# -- env ------------------------------------------------------------------------------------
def env_figures(lay: Layout, s: Sizes) -> Figures:
    from benchmarks.gpu_check.environment import collect

    figures = collect(probe_kernels=s.device == "cuda")  # fla's ops import Triton's CUDA side: slow, moot on CPU
    figures["run_variants"] = [v for v in figures["builtin_variants"] if s.variants is None or v in s.variants]
    figures["variants_note"] = s.variants_note
    return figures


def env_problem(f: Figures, s: Sizes) -> str | None:
    from benchmarks.gpu_check.environment import problem

    return problem(f, needs_cuda=s.device == "cuda")


# -- check ----------------------------------------------------------------------------------
def check_command(lay: Layout, s: Sizes) -> int:
    limit = f"{s.check_time_limit_s:g}"
    return attnbench("check", *_variants(lay), "--device", s.device, "--store", str(lay.store), "--time-limit", limit)


def check_figures(lay: Layout, s: Sizes) -> Figures:
    from benchmarks.gpu_check.figures import check_figures as read

    with _open(lay) as store:
        return read(store, _variants(lay))


def check_problem(f: Figures, s: Sizes) -> str | None:
    red = [
        v
        for v, per in f["variants"].items()
        if per.get("status") == "missing"
        or any(isinstance(x, dict) and x.get("status") in ("fail", "error") for x in per.values())
    ]
    return f"gate not green for {', '.join(red)}" if red else None


# -- smoke, gpt2, speed ---------------------------------------------------------------------
def smoke_figures(lay: Layout, s: Sizes) -> Figures:
    from benchmarks.gpu_check.figures import smoke_figures as read

    with _open(lay) as store:
        return read(store)


def smoke_problem(f: Figures, s: Sizes) -> str | None:
    bad = [m for m, r in f["models"].items() if not (r["status"] == "done" and r["decreasing"])]
    if bad or not f["models"]:
        return f"not finite and decreasing: {', '.join(bad) or 'no runs stored'}"
    return None


def gpt2_figures(lay: Layout, s: Sizes) -> Figures:
    from benchmarks.gpu_check.figures import gpt2_figures as read

    with _open(lay) as store:
        return read(store, s.gpt2_warm_steps)


def gpt2_problem(f: Figures, s: Sizes) -> str | None:
    if f.get("status") != "done" or f.get("tokens_per_s") is None:
        return f"GPT-2 run {f.get('status')}: {f.get('error')}"
    return None


def speed_figures(lay: Layout, s: Sizes) -> Figures:
    from benchmarks.gpu_check.figures import speed_figures as read

    with _open(lay) as store:
        return read(store)


def speed_problem(f: Figures, s: Sizes) -> str | None:
    bad = [c for c, r in f["curves"].items() if not c.endswith("(fla)") and r["status"] != "done"]
    if bad or "softmax" not in f["curves"]:
        return f"speed runs not done: {', '.join(bad) or 'no softmax baseline'}"
    return None


def fla_problem(f: Figures, s: Sizes) -> str | None:
    fla = {c: r for c, r in f["curves"].items() if c.endswith("(fla)")}
    bad = [c for c, r in fla.items() if r["status"] != "done"]
    if bad or not fla or "softmax" not in f["curves"]:
        return f"fla speed runs not done: {', '.join(bad) or 'no fla curve or no softmax baseline'}"
    return None


# -- report ---------------------------------------------------------------------------------
def report_command(lay: Layout, s: Sizes) -> int:
    return attnbench("report", "--suite", SUITE_NAME, "--store", str(lay.store), "--out", str(lay.report))


def report_figures(lay: Layout, s: Sizes) -> Figures:
    return {"files": sorted(str(p.relative_to(lay.root)) for p in lay.report.rglob("*") if p.is_file())}


def report_problem(f: Figures, s: Sizes) -> str | None:
    return None if f["files"] else "no report written"


@dataclass(frozen=True)
class StepCode:
    """A step: the command it runs (exit status), the figures it reads back, what is wrong with them."""

    command: Callable[[Layout, Sizes], int] | None
    figures: Callable[[Layout, Sizes], Figures]
    problem: Callable[[Figures, Sizes], str | None]


STEPS: dict[str, StepCode] = {
    "env": StepCode(None, env_figures, env_problem),
    "check": StepCode(check_command, check_figures, check_problem),
    "smoke": StepCode(lambda lay, s: _run(lay, s, "smoke"), smoke_figures, smoke_problem),
    "gpt2": StepCode(lambda lay, s: _run(lay, s, "gpt2"), gpt2_figures, gpt2_problem),
    "speed": StepCode(lambda lay, s: _run(lay, s, "speed"), speed_figures, speed_problem),
    "fla": StepCode(lambda lay, s: _run(lay, s, "speed-fla"), speed_figures, fla_problem),
    "report": StepCode(report_command, report_figures, report_problem),
}


def run_step(step: str, lay: Layout, s: Sizes, figures_only: bool) -> dict[str, Any]:
    """{"status", "reason", "figures", "exit"}: "ok", or "failed" with what is wrong."""
    code = STEPS[step]
    rc = code.command(lay, s) if code.command is not None and not figures_only else None
    figures = code.figures(lay, s)
    problem = code.problem(figures, s)
    if problem is None and rc not in (None, 0):
        problem = f"the command exited {rc}"
    return {"status": "failed" if problem else "ok", "reason": problem, "figures": figures, "exit": rc}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check.child")
    p.add_argument("step", choices=list(STEPS))
    p.add_argument("out", type=Path)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--figures-only", action="store_true")
    args = p.parse_args(argv)
    lay = Layout(args.out)
    try:
        record = run_step(args.step, lay, sizes(args.dry_run), args.figures_only)
    except Exception as exc:  # the step's own failure is data for the summary; its traceback goes to the log
        traceback.print_exc()
        record = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:500], "figures": {}, "exit": None}
    lay.step_json(args.step).write_text(json.dumps(record, default=str))
    print(f"step {args.step}: {record['status']}" + (f" ({record['reason']})" if record["reason"] else ""), flush=True)
    sys.stderr.flush()
    os._exit(0)  # done: skip the interpreter's teardown (threads, CUDA, Triton), which can outlast the time box


if __name__ == "__main__":
    main()
