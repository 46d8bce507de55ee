"""Every mixer's training step against the limit its FLOPs allow (issue 42), CPU fp32, one thread.

    python benchmarks/bench_mixers.py [--shapes findings,long] [--variants a,b] [--repeats 3]

Shapes (shared GPT-2 backbone, byte vocabulary, dropout 0):
  findings  d_model 64, 2 layers, 2 heads, T 64, batch 64   (the CPU suites' regime)
  long      d_model 128, 2 layers, 4 heads, T 8192, batch 1 (issue 42's long-context row)
A train step is forward + backward of the LM loss. Per mixer: median seconds per step over
``--repeats`` interleaved rounds after one warm-up (round-robin, so load drift hits all
mixers alike), tokens/s, achieved FLOP/s = 3 x the declared forward FLOPs per token x
tokens/s, its fraction of the fp32 matmul peak measured in this process (best of the runs
at start and end), and the ratios the issue's targets name: achieved FLOP/s over softmax's
and speed-up over softmax. The 1-minute load average is printed with each table: the
machine is shared, so compare ratios from one run, never absolute times across runs. Minor
page faults per step count memory the kernel handed back mid-step (each page zeroed). The
C heap keeps freed memory, as in a cell's process (``attnbench.run.heap``; ATTNBENCH_HEAP=system
to time the C library's defaults).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.nn.flops import model_facts
from attnbench.nn.peak import matmul_peak
from attnbench.registry.loader import load_registry
from attnbench.run.heap import keep_freed_heap

SHAPES = {  # name: (d_model, n_layer, n_head, T, batch)
    "findings": (64, 2, 2, 64, 64),
    "long": (128, 2, 4, 8192, 1),
}
SKIP = {"toy-ema"}  # the test suite's toy plugin, not a mechanism


def fp32_peak() -> float:
    """Best fp32 FLOP/s of 1024 x 1024 matmuls (harness.nn.peak's method, uncached)."""
    return matmul_peak.__wrapped__("cpu", "fp32")["peak_flops_per_s"]


def train_step(model: Backbone, x: torch.Tensor) -> None:
    model(x, x).loss.backward()
    model.zero_grad(set_to_none=True)


def bench_shape(shape: str, names: list[str], repeats: int) -> list[dict]:
    d, L, H, T, batch = SHAPES[shape]
    registry = load_registry()
    x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
    models, facts = {}, {}
    for name in names:
        variant = registry.get(name)
        config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0)
        torch.manual_seed(0)
        models[name] = Backbone(config, variant.build_mixer).train()
        facts[name] = model_facts(variant, config, T)
        train_step(models[name], x)  # warm-up
    times: dict[str, list[float]] = {n: [] for n in names}
    faults = dict.fromkeys(names, 0)  # minor page faults: memory the kernel hands back (and zeroes) mid-step
    inner = max(1, int(8192 // (batch * T)))  # several steps per timing at small shapes
    for _ in range(repeats):
        for name in names:
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            for _ in range(inner):
                train_step(models[name], x)
            times[name].append((time.perf_counter() - t0) / inner)
            faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    rows = []
    for name in names:
        s = statistics.median(times[name])
        flops = facts[name]["train_flops_per_token"]
        rows.append({"variant": name, "s": s, "spread": max(times[name]) / min(times[name]) - 1, "tok_s": batch * T / s,
                     "flop_s": None if flops is None else flops * batch * T / s,
                     "faults": faults[name] / (repeats * inner)})  # fmt: skip
    return rows


def print_table(shape: str, rows: list[dict], peak: float, load: tuple[float, float]) -> None:
    d, L, H, T, batch = SHAPES[shape]
    soft = next((r for r in rows if r["variant"] == "softmax"), None)
    print(f"\n## {shape}: d {d}, {L} layers, {H} heads, T {T}, batch {batch}; load1 {load[0]:.2f} -> {load[1]:.2f}")
    print(
        "| variant | ms/step | spread | tokens/s | GFLOP/s | of fp32 peak | FLOP/s vs softmax | speed-up vs softmax "
        "| page faults/step |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r["s"]):
        gf = "-" if r["flop_s"] is None else f"{r['flop_s'] / 1e9:.2f}"
        frac = "-" if r["flop_s"] is None else f"{100 * r['flop_s'] / peak:.1f}%"
        rel = "-" if soft is None or r["flop_s"] is None else f"{r['flop_s'] / soft['flop_s']:.2f}"
        up = "-" if soft is None else f"{soft['s'] / r['s']:.2f}x"
        print(f"| {r['variant']} | {r['s'] * 1e3:.1f} | {100 * r['spread']:.0f}% | {r['tok_s']:,.0f} | {gf} | {frac} "
              f"| {rel} | {up} | {r['faults']:,.0f} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="findings,long")
    ap.add_argument("--variants", default="")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    heap = keep_freed_heap()  # as a cell's process runs (ATTNBENCH_HEAP=system: the C library's defaults)
    names = [n for n in (args.variants.split(",") if args.variants else load_registry().names()) if n not in SKIP]
    peaks = [fp32_peak()]
    results = []
    for shape in args.shapes.split(","):
        before = os.getloadavg()[0]
        rows = bench_shape(shape, names, args.repeats)
        results.append((shape, rows, (before, os.getloadavg()[0])))
    peaks.append(fp32_peak())
    peak = max(peaks)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, fp32; cpus {os.cpu_count()}; heap {heap}")
    print(f"fp32 matmul peak (1024^3, best of 8, start / end): {peaks[0] / 1e9:.1f} / {peaks[1] / 1e9:.1f} GFLOP/s")
    for shape, rows, load in results:
        print_table(shape, rows, peak, load)


if __name__ == "__main__":
    main()
