"""Start-up cost of the `attnbench` command: CPU time (user + system) of each command's
process, median of several runs, against the targets of issue 43.

    python benchmarks/bench_startup.py [--repeats 5] [--attnbench PATH] [--compare PATH] [--all-plugins]

CPU time of the child (resource.getrusage(RUSAGE_CHILDREN)) moves far less with the load of
a shared machine than wall time does (printed beside it for reference); `--compare` times a
second console script (another checkout's) in the same rounds, interleaved, so both see the
same load. `import torch` alone is timed too: the floor of any command that needs torch. Only the
built-in plugins load (ATTNBENCH_PLUGINS), as in the README's main install, unless
`--all-plugins`: a plugin that imports torch at the top (the tests' toy plugin) adds torch's
import to every command that loads plugins.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
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


def one_run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``argv``; a failing command is an error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def medians(argvs: list[list[str]], repeats: int, env: dict[str, str], cwd: str) -> list[tuple[float, float]]:
    """(median CPU s, median wall s) per command line, timed in interleaved rounds after one warm-up each."""
    for argv in argvs:
        one_run(argv, env, cwd)  # warm the file cache and __pycache__
    runs: list[list[tuple[float, float]]] = [[] for _ in argvs]
    for _ in range(repeats):
        for i, argv in enumerate(argvs):
            runs[i].append(one_run(argv, env, cwd))
    return [(statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for rs in runs]


def plugins() -> tuple[list[str], list[str]]:
    """Entry-point names of the built-in plugins and of the other installed ones."""
    names = [(ep.name, ep.value.startswith("attnbench.")) for ep in md.entry_points(group="attnbench")]
    return sorted(n for n, ours in names if ours), sorted(n for n, ours in names if not ours)


def main() -> int:
    parser = argparse.ArgumentParser(description="CPU time of attnbench start-up, per command")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--attnbench",
        default=shutil.which("attnbench", path=str(Path(sys.executable).parent)) or "attnbench",
        help="the console script to time (default: the one beside this Python)",
    )
    parser.add_argument("--compare", metavar="PATH", help="another attnbench console script to time alongside")
    parser.add_argument(
        "--all-plugins",
        action="store_true",
        help="load every installed plugin (default: the built-ins alone, what the README's main install has)",
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
    builtin, others = plugins()
    if not args.all_plugins and others:  # e.g. the tests' toy plugin, which imports torch at the top
        env["ATTNBENCH_PLUGINS"] = ",".join(builtin)
    exes = [args.attnbench, *([args.compare] if args.compare else [])]
    print(f"{' vs '.join(exes)}; median of {args.repeats} runs; load average {os.getloadavg()[0]:.1f}")
    loaded = "every installed plugin" if args.all_plugins or not others else f"built-ins only (not {', '.join(others)})"
    print(f"plugins: {loaded}")
    head = f"{'command':<28}{'CPU s':>8}{'wall s':>9}{'target':>9}  ok"
    print(head + (f"{'compare CPU s':>16}{'wall s':>9}" if args.compare else ""))
    (torch_cpu, torch_wall), *_ = medians([[sys.executable, "-c", "import torch"]], args.repeats, env, cache)
    print(f"{'(python -c import torch)':<28}{torch_cpu:>8.2f}{torch_wall:>9.2f}")
    missed = 0
    for command, target in COMMANDS:
        timed = medians([[exe, *command] for exe in exes], args.repeats, env, cache)
        cpu, wall = timed[0]
        missed += cpu > target
        ok = "yes" if cpu <= target else "NO"
        line = f"{'attnbench ' + ' '.join(command):<28}{cpu:>8.2f}{wall:>9.2f}{target:>9.1f}  {ok}"
        print(line + "".join(f"{c:>16.2f}{w:>9.2f}" for c, w in timed[1:]))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
