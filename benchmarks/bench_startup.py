"""Start-up cost of the `attnbench` command: CPU time (user + system) of each command's
process, median of several runs, against the targets of issue 43.

    python benchmarks/bench_startup.py [--repeats 5] [--attnbench PATH]

CPU time of the child (resource.getrusage(RUSAGE_CHILDREN)) barely moves with the load of
a shared machine, where wall time would; wall time is printed beside it for reference.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (command line, target CPU seconds)
COMMANDS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("--help",), 0.5),
    (("run", "--help"), 0.5),
    (("suites",), 1.5),
    (("validate", "quick"), 1.5),
    (("list",), 3.0),
)


def one_run(exe: str, args: tuple[str, ...], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``exe args``; a failing command is an error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([exe, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"attnbench {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> int:
    parser = argparse.ArgumentParser(description="CPU time of attnbench start-up, per command")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--attnbench",
        default=shutil.which("attnbench", path=str(Path(sys.executable).parent)) or "attnbench",
        help="the console script to time (default: the one beside this Python)",
    )
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="attnbench-startup-")
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": os.path.join(cache, "hf"),
        "MPLCONFIGDIR": os.path.join(cache, "mpl"),
    }
    print(f"{args.attnbench}; median of {args.repeats} runs; load average {os.getloadavg()[0]:.1f}")
    print(f"{'command':<28}{'CPU s':>8}{'wall s':>9}{'target':>9}  ok")
    missed = 0
    for command, target in COMMANDS:
        one_run(args.attnbench, command, env, cache)  # warm the file cache and __pycache__
        runs = [one_run(args.attnbench, command, env, cache) for _ in range(args.repeats)]
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        ok = cpu <= target
        missed += not ok
        label = "attnbench " + " ".join(command)
        print(f"{label:<28}{cpu:>8.2f}{wall:>9.2f}{target:>9.1f}  {'yes' if ok else 'NO'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
