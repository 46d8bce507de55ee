"""The GPU check's driver: runs the steps in order, each in a child process under its time
box (a step that overruns is stopped, and what it stored is still read back), then writes
summary.json and summary.md and prints the summary.

    python -m benchmarks.gpu_check OUT [--dry-run] [--steps check,speed] [--budget SECONDS] [--parse-only]

Every argument is checked before anything is made or run: a budget that is not a finite number
of seconds (at least a step's smallest box), --steps naming no step or an unknown one, and an
OUT that is an existing file (or lies under one) are refused with one line.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.gpu_check.layout import Layout
from benchmarks.gpu_check.plan import OPT_IN_STEPS, Sizes, Step, sizes, suite
from benchmarks.gpu_check.summary import write_summary

REPO = Path(__file__).resolve().parents[2]
MIN_BOX_S = 5.0  # a step left less than this is skipped, not started
FIGURES_BOX_S = 60.0  # reading back what a stopped step stored


@functools.cache
def _cache_dir() -> Path:
    """One temporary folder per driver run for the children's matplotlib and hub caches."""
    return Path(tempfile.mkdtemp(prefix="gpu-check-cache-"))


def _child_env(dry_run: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if dry_run:  # tiny models gain nothing from threads, and on a busy machine threads spin-wait on each other
        env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MPLCONFIGDIR", str(_cache_dir() / "mpl"))
    env.setdefault("HF_HOME", str(_cache_dir() / "hf"))
    # Triton caches compiled kernels on disk; this keeps autotuning results too, where Triton supports it.
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    return env


def _run_child(args: list[str], log: Path, box_s: float) -> str:
    """Run ``python -m benchmarks.gpu_check.child ARGS``, output appended to ``log``: "done" or "timeout"."""
    cmd = [sys.executable, "-m", "benchmarks.gpu_check.child", *args]
    with log.open("a") as f:
        f.write(f"# {' '.join(cmd)} (time box {box_s:.0f} s)\n")
        f.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=_child_env("--dry-run" in args),
            start_new_session=True,
        )
        try:
            proc.wait(timeout=box_s)
            return "done"
        except subprocess.TimeoutExpired:
            _stop(proc)
            f.write(f"\n# stopped: over its time box of {box_s:.0f} s\n")
            return "timeout"


def _stop(proc: subprocess.Popen) -> None:
    """End the child and what it started (its own process group), politely first."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _children_cpu() -> float:
    """CPU seconds of the finished child processes (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _blocked(step: Step, lay: Layout, s: Sizes) -> str | None:
    """Why a step cannot run: the fla step without CUDA, or the environment step did not pass."""
    if step.name == "fla" and not s.fla:
        return "kernel: fla needs CUDA and flash-linear-attention (the dry run has neither)"
    if step.name == "env":
        return None
    env = lay.step_json("env")
    if not env.exists():
        return "the environment step has not run (run it first: --steps env,...)"
    record = json.loads(env.read_text())
    if record["status"] != "ok":
        return f"environment step {record['status']}: {record['reason']}"
    return None


def _write_suite(lay: Layout, s: Sizes) -> None:
    env = json.loads(lay.step_json("env").read_text())
    lay.suite.write_text(yaml.safe_dump(suite(s, env["figures"]["run_variants"]), sort_keys=False))


def box_s(step: Step, later: list[Step], left_s: float, scale: float) -> float:
    """The step's box: its own (scaled with the budget), cut so that the later steps keep their floors."""
    return min(step.box_s * scale, left_s - scale * sum(s.floor_s for s in later))


def run_steps(lay: Layout, s: Sizes, chosen: list[str], budget_s: float) -> None:
    """Each chosen step in order; its record (status, reason, wall and box seconds, figures) to
    steps/<step>.json. A budget other than the mode's own scales every box and floor with it."""
    deadline, scale = time.monotonic() + budget_s, budget_s / s.budget_s
    steps = [st for st in s.steps if st.name in chosen]
    for i, step in enumerate(steps):
        record: dict[str, Any] = {"name": step.name, "title": step.title, "log": str(lay.log(step.name).name)}
        box = box_s(step, steps[i + 1 :], deadline - time.monotonic(), scale)
        blocked = _blocked(step, lay, s)
        if blocked is None and box < MIN_BOX_S:
            blocked = f"time budget spent ({budget_s:.0f} s in all); rerun with --steps {step.name}"
        lay.step_json(step.name).unlink(missing_ok=True)
        if blocked is not None:
            record.update(status="skipped", reason=blocked, wall_s=0.0, box_s=max(box, 0.0))
        else:
            record.update(_one(step, lay, s, box))
            if step.name == "env" and record["status"] == "ok":
                _write_suite(lay, s)
        lay.step_json(step.name).write_text(json.dumps(record, default=str))
        print(f"[gpu-check] {step.name}: {record['status']} in {record['wall_s']:.0f} s", flush=True)


def _one(step: Step, lay: Layout, s: Sizes, box: float) -> dict[str, Any]:
    args = [step.name, str(lay.root)] + (["--dry-run"] if s.mode == "dry-run" else [])
    started, cpu = time.monotonic(), _children_cpu()
    ended = _run_child(args, lay.log(step.name), box)
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu
    if ended == "timeout" and step.name != "env":  # what the stopped step stored still counts
        _run_child([*args, "--figures-only"], lay.log(step.name), FIGURES_BOX_S)
    path = lay.step_json(step.name)
    child = json.loads(path.read_text()) if path.exists() else {}
    record = {
        "wall_s": wall,
        "cpu_s": cpu,
        "box_s": box,
        "figures": child.get("figures", {}),
        "exit": child.get("exit"),
    }
    if ended == "timeout":
        return record | {
            "status": "timeout",
            "reason": f"stopped at its time box of {box:.0f} s; figures: what it stored",
        }
    if not child:
        return record | {"status": "error", "reason": f"the step wrote no result; see logs/{step.name}.log"}
    return record | {"status": child["status"], "reason": child["reason"]}


def _budget(raw: str) -> float:
    """--budget: a finite number of seconds, at least one step's smallest box (argparse names the option)."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < MIN_BOX_S:
        raise argparse.ArgumentTypeError(
            f"{raw} is not a time budget: give a finite number of seconds of at least {MIN_BOX_S:g} (a step "
            "is given no less), or leave --budget out for the default (540 on a GPU, 90 dry run)"
        )
    return value


def _chosen_steps(p: argparse.ArgumentParser, raw: str | None, names: list[str]) -> list[str]:
    """The steps --steps names (None: all but the opt-in ones); naming none, or an unknown one, is an error."""
    if raw is None:
        return [n for n in names if n not in OPT_IN_STEPS]
    chosen = [n.strip() for n in raw.split(",") if n.strip()]
    if not chosen:
        p.error(
            f"--steps {raw!r} names no step; give comma-separated steps ({', '.join(names)}), or leave "
            f"--steps out to run all but {', '.join(OPT_IN_STEPS)}"
        )
    unknown = [n for n in chosen if n not in names]
    if unknown:
        p.error(f"unknown steps {unknown}; the steps are {', '.join(names)}")
    return chosen


def _out_folder(p: argparse.ArgumentParser, out: Path) -> Path:
    """OUT resolved; an existing file at it or above it is an error (the folder is made later)."""
    root = out.expanduser().resolve()
    blocking = next((q for q in (root, *root.parents) if q.exists() and not q.is_dir()), None)
    if blocking is not None:
        where = "OUT is" if blocking == root else f"{blocking}, a folder above OUT, is"
        p.error(f"{out}: {where} an existing file, not a folder; give OUT a folder path (made if missing), or move it")
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description="One-command GPU check (issue 41).")
    p.add_argument("out", type=Path, help="output folder (store, logs, report, summary.json, summary.md)")
    p.add_argument("--dry-run", action="store_true", help="the same steps on CPU at tiny sizes (logic and layout only)")
    steps_help = f"comma-separated steps to (re)run into the same folder (default: all but {', '.join(OPT_IN_STEPS)})"
    p.add_argument("--steps", help=steps_help)
    p.add_argument("--budget", type=_budget, help="seconds for the whole check (default: 540 on a GPU, 90 dry run)")
    p.add_argument(
        "--parse-only",
        action="store_true",
        help="check the arguments, say what would run, and stop (nothing is made; the script runs this first)",
    )
    args = p.parse_args(argv)
    s = sizes(args.dry_run)
    chosen = _chosen_steps(p, args.steps, [st.name for st in s.steps])
    root = _out_folder(p, args.out)
    budget = s.budget_s if args.budget is None else args.budget
    if args.parse_only:
        mode = "dry run (CPU)" if args.dry_run else "GPU"
        print(f"{mode}: steps {', '.join(chosen)} into {root}, {budget:g} s budget", flush=True)
        return 0
    lay = Layout(root)
    try:
        lay.make()
    except OSError as exc:
        p.error(f"{args.out}: cannot make the output folder ({exc.strerror or exc}); give OUT a writable folder path")
    started = time.time()
    run_steps(lay, s, chosen, budget)
    summary = write_summary(lay, s, started, time.time(), budget)
    print(lay.summary_md.read_text(), flush=True)
    return 0 if all(st["status"] == "ok" for st in summary["steps"] if st["name"] in chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
