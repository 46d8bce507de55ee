"""GLA's train step at each chunk size, one process, one thread, CPU fp32 (issue 42).

    python benchmarks/bench_gla_chunks.py [--shapes findings,long] [--chunks 8,16,32,64] [--repeats 7]

Scores inside a chunk are one matmul per chunk (``gla_kernel._channel_scores``) unless the
chunk's decay spans more than e^-FACTOR_SPAN: a larger chunk means fewer chunks to carry a
state across but a costlier pairwise fallback. One model per chunk size, same weights; each
round times one train step of each (forward + backward of the LM loss), round-robin so load
drift hits all alike. Prints the median ms/step and the time against ``--base``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.registry.loader import load_registry

SHAPES = {"findings": (64, 2, 2, 64, 64), "long": (128, 2, 4, 8192, 1)}  # d, layers, heads, T, batch


def bench(shape: str, chunks: list[int], base: int, repeats: int) -> None:
    d, L, H, T, batch = SHAPES[shape]
    variant = load_registry().get("gla")
    x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
    models = {}
    for c in chunks:
        options = variant.make_options({"chunk_size": c})
        config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0, options=options)
        torch.manual_seed(0)
        models[c] = Backbone(config, variant.build_mixer).train()

    def step(model: Backbone) -> float:
        start = time.perf_counter()
        model(x, x).loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    for model in models.values():
        step(model)  # warm-up
    times: dict[int, list[float]] = {c: [] for c in chunks}
    for _ in range(repeats):
        for c, model in models.items():
            times[c].append(step(model))
    med = {c: statistics.median(t) for c, t in times.items()}
    print(f"\n## {shape}: d {d}, {L} layers, {H} heads, T {T}, batch {batch}; load1 {os.getloadavg()[0]:.2f}")
    print(f"| chunk | ms/step (median of {repeats}) | time vs chunk {base} |\n|---|---|---|")
    for c in chunks:
        print(f"| {c} | {med[c] * 1e3:.1f} | {med[c] / med[base]:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description="GLA's train step at each chunk size")
    ap.add_argument("--shapes", default="findings,long")
    ap.add_argument("--chunks", default="8,16,32,64")
    ap.add_argument("--base", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    chunks = [int(c) for c in args.chunks.split(",")]
    if args.base not in chunks:
        ap.error(f"--base {args.base} is not among --chunks {args.chunks}")
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, fp32")
    for shape in args.shapes.split(","):
        bench(shape, chunks, args.base, args.repeats if shape == "findings" else max(3, args.repeats // 2))


if __name__ == "__main__":
    main()
