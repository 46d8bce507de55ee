"""One training step of the quick suite's text and recall cells, variant against softmax (issue 56).

    python benchmarks/bench_quick_cells.py [--suite suites/quick.yaml] [--experiments recall,text]
        [--variants softmax,heinsen,future,heinsen:chunked,future:lean] [--threads 1,2] [--repeats 7] [--inner 0]

``heinsen:chunked`` and ``future:lean`` are the variants with their small-T paths switched off
(every forward through the chunked kernel, or the lean kernels): the code before issue 56's
one-chunk and dense paths, timed beside them.

The models, batch shapes and optimizer are the suite's own cells (``plan.cells.expand``, the
first seed's cell per experiment and variant; ``experiments.train.loop``), and a step is what
a cell's loop times: forward, backward of the loss (the auxiliary losses included), gradient
clipping, AdamW step, gradients cleared, on random tokens of the cell's (batch, seq_len).
Per table (one experiment at one torch thread count, the cells' worker setting): every
variant warmed up, then ``--repeats`` rounds, each running ``--inner`` steps of every
variant in turn (round-robin, so load drift hits all alike); the median seconds per step,
the spread (max / min - 1) and the ratio of the median to softmax's. The C heap keeps freed
memory as in a cell's process. The machine may be shared: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from attnbench.experiments.train.loop import build_model, make_optimizer
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import expand
from attnbench.plan.suite import load_suite
from attnbench.plan.validation import check_suite
from attnbench.registry.loader import load_registry
from attnbench.run.heap import keep_freed_heap

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "unknown")


# name:path -> (the mixer attribute that switches the small-T path, its value for that path)
PATHS = {"heinsen:chunked": ("one_chunk_path", False), "future:lean": ("dense_path", False)}


class Runner:
    """One cell's model, optimizer and batch; ``step`` is one training step of its loop."""

    def __init__(self, cell, variant, path: str | None = None) -> None:
        t = cell.spec_as(TrainSpec)
        torch.manual_seed(cell.seed)
        self.model = build_model(variant, cell).train()
        if path is not None:
            attr, value = PATHS[path]
            for module in self.model.modules():
                if hasattr(module, attr):
                    setattr(module, attr, value)  # an instance attribute over the class default
        self.opt = make_optimizer(self.model, cell)
        for group in self.opt.param_groups:
            group["lr"] = min(t.lr, 1e-4)  # small: the weights stay near their start over the timing
        gen = torch.Generator().manual_seed(0)
        V = cell.model.vocab_size
        self.x = torch.randint(0, V, (t.batch_size, t.seq_len), generator=gen)  # (B, T)
        self.y = torch.randint(0, V, (t.batch_size, t.seq_len), generator=gen)  # (B, T)
        self.clip = t.grad_clip
        self.tokens = t.batch_size * t.seq_len

    def step(self) -> None:
        out = self.model(self.x, self.y)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def cells_of(suite_path: str, experiments: list[str], names: list[str]) -> dict[str, dict[str, tuple]]:
    """Per experiment, per name (a variant, or variant:path): (cell, variant, path)."""
    registry = load_registry()
    suite = load_suite(suite_path)
    out: dict[str, dict[str, tuple]] = {e: {} for e in experiments}
    for cell in expand(check_suite(suite, registry)):
        for name in names:
            variant, _, path = name.partition(":")
            if cell.experiment in out and cell.variant == variant and name not in out[cell.experiment]:
                out[cell.experiment][name] = (cell, registry.get(variant), name if path else None)
    return out


def bench(runners: dict[str, Runner], repeats: int, inner: int) -> dict[str, list[float]]:
    for r in runners.values():  # warm-up: allocator, first-call paths
        for _ in range(3):
            r.step()
    times: dict[str, list[float]] = {n: [] for n in runners}
    for _ in range(repeats):
        for name, r in runners.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                r.step()
            times[name].append((time.perf_counter() - t0) / inner)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / "suites" / "quick.yaml"))
    ap.add_argument("--experiments", default="recall,text")
    ap.add_argument("--variants", default="softmax,heinsen,future,heinsen:chunked,future:lean")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--inner", type=int, default=0, help="steps per timing; 0: about 0.25 s of softmax")
    args = ap.parse_args()
    heap = keep_freed_heap()  # as a cell's process runs
    variants = args.variants.split(",")
    if "softmax" not in variants:
        variants.insert(0, "softmax")
    cells = cells_of(args.suite, args.experiments.split(","), variants)
    print(f"cpu {cpu_model()}; cpus {os.cpu_count()}; torch {torch.__version__}; fp32; heap {heap}")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for exp, by_variant in cells.items():
            runners = {n: Runner(*by_variant[n]) for n in variants if n in by_variant}
            inner = args.inner
            if inner <= 0:
                t0 = time.perf_counter()
                for _ in range(3):
                    runners["softmax"].step()
                inner = max(1, round(0.25 / ((time.perf_counter() - t0) / 3)))
            load0 = os.getloadavg()[0]
            times = bench(runners, args.repeats, inner)
            soft = statistics.median(times["softmax"])
            cell = by_variant["softmax"][0]
            t = cell.spec_as(TrainSpec)
            m = cell.model
            print(
                f"\n## {exp}: d_model {m.d_model}, {m.n_layer} layers, {m.n_head} heads, mlp {m.mlp}, "
                f"batch {t.batch_size}, T {t.seq_len}; {torch.get_num_threads()} thread(s); "
                f"{args.repeats} rounds x {inner} steps; load1 {load0:.2f} -> {os.getloadavg()[0]:.2f}"
            )
            print("| variant | ms/step | spread | tokens/s | x softmax's time |")
            print("|---|---|---|---|---|")
            for name, ts in times.items():
                s = statistics.median(ts)
                spread = max(ts) / min(ts) - 1
                tok = runners[name].tokens / s
                print(f"| {name} | {s * 1e3:.2f} | {100 * spread:.0f}% | {tok:,.0f} | {s / soft:.2f} |")


if __name__ == "__main__":
    main()
