"""A chunked mixer's train step at several chunk sizes, beside softmax, in one process (issue 42).

    python benchmarks/bench_chunk.py gla --chunks 4,8,16,32 [--shape findings|long] [--repeats 4]

The shapes are bench_mixers.py's (findings: d 64, 2 layers, 2 heads, T 64, batch 64; long: d 128,
2 layers, 4 heads, T 8192, batch 1). One thread, fp32; every model is built once and the models
take turns step by step (round-robin after a warm-up round), so load drift hits all alike; the
best of ``--repeats`` rounds is printed with its speed relative to softmax, and the load average.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.registry.loader import load_registry

SHAPES = {"findings": (64, 2, 2, 64, 64), "long": (128, 2, 4, 8192, 1)}  # d, layers, heads, T, batch


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("variant", help="a variant whose options have chunk_size (gla, retnet, mamba2, deltanet, ...)")
    ap.add_argument("--chunks", default="4,8,16,32,64", help="comma-separated chunk sizes")
    ap.add_argument("--shape", default="findings", choices=list(SHAPES))
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    registry = load_registry()
    variant = registry.get(args.variant)
    d, L, H, T, batch = SHAPES[args.shape]
    x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
    models: dict[str, Backbone] = {}
    for c in args.chunks.split(","):
        options = variant.make_options({"chunk_size": int(c)})
        config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0, options=options)
        torch.manual_seed(0)
        models[f"chunk {c}"] = Backbone(config, variant.build_mixer).train()
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0)
    models["softmax"] = Backbone(config, registry.get("softmax").build_mixer).train()
    best = dict.fromkeys(models, float("inf"))
    load0 = os.getloadavg()[0]
    for i in range(args.repeats + 1):  # round 0 warms up
        for name, model in models.items():
            start = time.perf_counter()
            model(x, x).loss.backward()
            model.zero_grad(set_to_none=True)
            if i:
                best[name] = min(best[name], time.perf_counter() - start)
    print(f"{args.variant}, {args.shape}: d {d}, {L} layers, {H} heads, T {T}, batch {batch}; best of "
          f"{args.repeats}, one thread, fp32; load1 {load0:.2f} -> {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| model | ms/step | speed vs softmax |")
    print("|---|---|---|")
    for name, b in best.items():
        print(f"| {name} | {b * 1e3:.1f} | {best['softmax'] / b:.2f}x |")


if __name__ == "__main__":
    main()
