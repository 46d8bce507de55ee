"""CPU bf16 autocast against fp32 (issue 42): the probe ``train.precision: auto`` would run,
then each mixer's training step in both, side by side in one process, one thread.

    python benchmarks/bench_cpu_bf16.py [--variants softmax,linear,retnet,gla,mamba2] [--repeats 3]

Shape: d_model 64, 2 layers, 2 heads, T 64, batch 64 (the findings shape). A train step is
forward (under autocast for bf16) + backward of the LM loss. Prints the CPU's detected
features, the probe's fp32 and bf16 matmul rates, what ``auto`` resolves to, and per mixer
the best-of-repeats ms/step in fp32 and bf16 and their ratio, with the 1-minute load.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.nn.precision import autocast_for, bf16_probe, resolve
from attnbench.registry.loader import load_registry

CPU = torch.device("cpu")


def step(model: Backbone, x: torch.Tensor, precision) -> None:
    with autocast_for(CPU, precision):
        loss = model(x, x).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="softmax,linear,retnet,gla,gated_deltanet,mamba2,based")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    probe, auto = bf16_probe(), resolve(CPU, "auto")
    print(f"cpu: {probe['cpu']}; torch capability {probe['cpu_capability']}; flags {', '.join(probe['cpu_flags'])}")
    print(
        f"probe ({probe['probe_method']}): fp32 {probe['probe_fp32_gflops']:.1f} GFLOP/s, "
        f"bf16 {probe['probe_bf16_gflops']:.1f} GFLOP/s, x{probe['probe_bf16_speedup']:.2f}; "
        f"auto -> {auto.dtype} ({auto.reason})"
    )
    registry, load0 = load_registry(), os.getloadavg()[0]
    x = torch.randint(0, 256, (64, 64), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
    modes = {"fp32": resolve(CPU, "fp32"), "bf16": resolve(CPU, "bf16")}
    rows = []
    for name in args.variants.split(","):
        config = ModelConfig(vocab_size=256, d_model=64, n_layer=2, n_head=2, context=64)
        torch.manual_seed(0)
        model = Backbone(config, registry.get(name).build_mixer).train()
        best = {m: float("inf") for m in modes}
        for i in range(args.repeats + 1):  # round 0 warms up; fp32 and bf16 interleaved
            for mode, prec in modes.items():
                start = time.perf_counter()
                step(model, x, prec)
                if i:
                    best[mode] = min(best[mode], time.perf_counter() - start)
        rows.append((name, best["fp32"], best["bf16"]))
    load1 = os.getloadavg()[0]
    print(f"\nd 64, 2 layers, 2 heads, T 64, batch 64; best of {args.repeats}; load1 {load0:.2f} -> {load1:.2f}")
    print("| variant | fp32 ms/step | bf16 ms/step | bf16 speed-up |")
    print("|---|---|---|---|")
    for name, f32, b16 in rows:
        print(f"| {name} | {f32 * 1e3:.1f} | {b16 * 1e3:.1f} | {f32 / b16:.2f}x |")


if __name__ == "__main__":
    main()
