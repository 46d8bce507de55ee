"""The speed experiment's isolation pass on a CPU: one fresh process per point, started from
the fork server (torch imported once; attnbench.experiments.speed.memory) or spawned (an
interpreter and torch start per point), side by side in one run.

    python benchmarks/bench_isolation.py [--rounds 5] [--sizes 256,1024]

Per start method and matmul size n: the median wall seconds of ``measure_peak`` (process start,
setup, the call, the result back) and the peak memory it reports for one n x n float32 matmul,
whose output is 4 n^2 bytes. A spawned child counts the library code its first call faults in;
a forked one maps its libraries' pages first.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import time

from attnbench.experiments.speed import memory

ALL_METHODS = mp.get_all_start_methods


def matmul(n: int, device: str = "cpu"):
    """Setup: two n x n matrices; the measured call multiplies them."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    return lambda: a @ b


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="256,1024")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# {platform.processor() or platform.machine()}, {mp.cpu_count()} CPUs; rounds {args.rounds}")
    print(f"{'start':<11} {'n':>5} {'median s':>9} {'peak MiB':>9} {'output MiB':>10}")
    for n in sizes:
        for how in ("spawn", "forkserver"):
            mp.get_all_start_methods = (lambda: ["spawn"]) if how == "spawn" else ALL_METHODS
            walls, peaks = [], []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                peak = memory.measure_peak("__main__:matmul", timeout=120, device="cpu", n=n)
                walls.append(time.perf_counter() - t0)
                if peak.status != "ok" or peak.bytes is None:
                    raise SystemExit(f"{how} n={n}: {peak.status} {peak.error}")
                peaks.append(peak.bytes)
            print(
                f"{peak.process:<11} {n:>5} {statistics.median(walls):>9.2f} "
                f"{statistics.median(peaks) / 2**20:>9.2f} {4 * n * n / 2**20:>10.2f}"
            )
    mp.get_all_start_methods = ALL_METHODS


if __name__ == "__main__":
    main()
