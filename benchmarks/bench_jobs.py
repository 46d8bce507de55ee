"""Cells per minute: one process with 2 torch threads (`--jobs 1`) against two single-threaded
workers (`--jobs 2`), on the same small suite, each into a fresh temporary store.

    python benchmarks/bench_jobs.py [--steps 400] [--seeds 6]

Prints cells/min over the whole command (start-up and trust gate included) and over the
cells alone (first cell start to last cell end, from the store), with the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from attnbench.store.database import Store

SUITE = """
version: 1
name: bench-jobs
defaults:
  data: {{source: builtin}}
  model: {{d_model: 64, n_layer: 2, n_head: 2}}
  train: {{batch_size: 8, seq_len: 64, lr: 3.0e-3, warmup_steps: 10, eval_interval: {steps}, eval_tokens: 4096,
          checkpoint: false}}
experiments:
  - name: jobs
    kind: train
    variants: [softmax, linear]
    train: {{budget: {{steps: {steps}}}}}
    seeds: {seeds}
"""

WAYS = {"1 worker x 2 threads": ("1", "2"), "2 workers x 1 thread": ("2", "1")}  # name -> (--jobs, threads)


def run_once(suite: Path, store: Path, jobs: str, threads: str) -> tuple[int, float, float]:
    """(cells stored, seconds of the whole command, seconds from first cell start to last end)."""
    env = {
        **os.environ,
        "ATTNBENCH_PLUGINS": "softmax,linear",
        "HF_DATASETS_OFFLINE": "1",
        **{k: threads for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["attnbench", "run", str(suite), "--store", str(store), "--jobs", jobs, "--device", "cpu", "--no-report"],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"--jobs {jobs} failed:\n{proc.stderr[-3000:]}")
    with Store(store) as s:
        runs = [r for r in s.runs() if r["status"] == "done"]
    return len(runs), wall, max(r["finished_at"] for r in runs) - min(r["started_at"] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="training steps per cell")
    ap.add_argument("--seeds", type=int, default=6, help="seeds per variant (cells = 2 x seeds)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        suite = Path(tmp) / "suite.yaml"
        suite.write_text(SUITE.format(steps=args.steps, seeds=list(range(args.seeds))))
        load_before = os.getloadavg()
        rows = []
        for name, (jobs, threads) in WAYS.items():
            cells, wall, window = run_once(suite, Path(tmp) / f"jobs{jobs}" / "store.sqlite", jobs, threads)
            rows.append((name, cells, wall, window))
        load_after = os.getloadavg()
    print(
        f"{args.seeds * 2} cells (softmax, linear x {args.seeds} seeds), d64x2, T=64, batch 8, {args.steps} steps; "
        f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores"
    )
    print(f"{'':<22} {'cells/min (command)':>20} {'cells/min (cells)':>18} {'command s':>10}")
    for name, cells, wall, window in rows:
        print(f"{name:<22} {60 * cells / wall:>20.1f} {60 * cells / window:>18.1f} {wall:>10.1f}")
    print(
        "load average (1, 5, 15 min) before: "
        + ", ".join(f"{x:.2f}" for x in load_before)
        + "; after: "
        + ", ".join(f"{x:.2f}" for x in load_after)
    )


if __name__ == "__main__":
    main()
