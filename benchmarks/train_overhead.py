"""Training-loop overhead: `attnbench`'s train step (data sampling, LR schedule, logging,
metric collection, storing the cell) against a bare forward/backward/clip/AdamW loop on
the same model and batch shape.

    python benchmarks/train_overhead.py [--steps 150] [--repeats 3]

Prints per-step medians and the overhead in percent (target: < 3%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from attnbench.data.corpus import sample_batch
from attnbench.data.loading import load_corpus
from attnbench.experiments.registry import expand_suite
from attnbench.experiments.train.loop import build_model, make_optimizer
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store

SUITE = """
version: 1
name: overhead
experiments:
  - name: overhead
    kind: train
    variants: [softmax]
    models: [{{d_model: 128, n_layer: 6, n_head: 4}}]
    data: {{source: stdlib, max_bytes: 2000000}}
    train: {{budget: {{steps: {steps}}}, batch_size: 8, seq_len: 256, eval_interval: 100000,
             eval_tokens: 2048, log_interval: 10, checkpoint: false}}
"""


def bare_loop(cell, variant, corpus, steps: int) -> float:
    """Seconds per step of forward/backward/clip/AdamW on one fixed, pre-sampled batch."""
    torch.manual_seed(cell.seed)
    model = build_model(variant, cell)
    opt = make_optimizer(model, cell)
    x, y = sample_batch(corpus.train, cell.spec.batch_size, cell.spec.seq_len, torch.Generator().manual_seed(0))
    model.train()
    t0 = time.perf_counter()
    for _ in range(steps):
        model(x, y).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cell.spec.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps


def harness_loop(suite_path: Path, steps: int) -> float:
    """Seconds per step of a whole `attnbench run` cell, minus its held-out evaluation."""
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.sqlite") as store, open(os.devnull, "w") as null:
        t0 = time.perf_counter()
        run_suite(load_suite(suite_path), store, load_registry(), device="cpu", out=null)
        wall = time.perf_counter() - t0
        [row] = store.runs()
        eval_s = row["summary"]["eval_time_s"]  # held-out evaluation is measured work, not overhead
    return (wall - eval_s) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        suite_path = Path(tmp) / "overhead.yaml"
        suite_path.write_text(SUITE.format(steps=args.steps))
        registry = load_registry()
        suite = load_suite(suite_path)
        [cell] = expand_suite(suite, registry, corpus_hash=lambda s: load_corpus(s).sha256)
        variant, corpus = registry.get("softmax"), load_corpus(cell.data_spec())
        bare, full = [], []
        for _ in range(args.repeats):  # interleaved, so drift in machine load hits both
            bare.append(bare_loop(cell, variant, corpus, args.steps))
            full.append(harness_loop(suite_path, args.steps))
    b, f = statistics.median(bare), statistics.median(full)
    print(f"model: softmax backbone d=128 L=6 H=4, batch 8 x 256, fp32 CPU, {torch.get_num_threads()} threads")
    print(f"bare loop     : {b * 1e3:8.2f} ms/step  (runs: {', '.join(f'{v * 1e3:.1f}' for v in bare)})")
    print(f"attnbench run : {f * 1e3:8.2f} ms/step  (runs: {', '.join(f'{v * 1e3:.1f}' for v in full)})")
    print(f"overhead      : {100 * (f - b) / b:+.2f} %   (target < 3 %)")


if __name__ == "__main__":
    main()
