"""Based's train step with its Taylor kernel (scores inside a chunk from q~.k~) against the
shared feature-space kernel it replaced (``linear_attention`` over the 1 + f + f^2 Taylor
features), in one process, one thread, CPU fp32 (issue 42).

    python benchmarks/bench_taylor.py [--shapes findings,long] [--repeats 7]

One Based model per shape; each round times one train step (forward + backward of the LM
loss) with the feature-space kernel patched in, one with the Taylor kernel, and one of a
softmax model as the control, so load drift hits all three alike. Prints the median ms/step
of each, new/old, and the speed-up of each over softmax.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from attnbench import Backbone, ModelConfig, linear_attention
from attnbench.plugins.linear_model import taylor_features
from attnbench.plugins.recurrent import based_model
from attnbench.registry.loader import load_registry

SHAPES = {"findings": (64, 2, 2, 64, 64), "long": (128, 2, 4, 8192, 1)}  # d, layers, heads, T, batch
NEW = based_model.taylor_attention


def feature_space(qf, kf, v, state, chunk, eps):
    """The kernel before: the features materialised for the scores inside a chunk too."""
    dt = torch.float64 if qf.dtype == torch.float64 else torch.float32
    return linear_attention(taylor_features(qf.to(dt)), taylor_features(kf.to(dt)), v, state, chunk, eps)


def timed(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def bench(shape: str, repeats: int) -> None:
    d, L, H, T, batch = SHAPES[shape]
    registry = load_registry()
    config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0)
    x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
    models = {name: Backbone(config, registry.get(name).build_mixer).train() for name in ("based", "softmax")}

    def step(name: str, kernel=NEW) -> Callable[[], None]:
        def run() -> None:
            based_model.taylor_attention = kernel
            models[name](x, x).loss.backward()
            models[name].zero_grad(set_to_none=True)

        return run

    steps = {"based, feature space (before)": step("based", feature_space), "based, Taylor kernel (now)": step("based")}
    steps["softmax (control)"] = step("softmax")
    for run in steps.values():
        run()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, run in steps.items():
            times[name].append(timed(run))
    based_model.taylor_attention = NEW
    med = {name: statistics.median(t) for name, t in times.items()}
    soft = med["softmax (control)"]
    print(f"\n## {shape}: d {d}, {L} layers, {H} heads, T {T}, batch {batch}; load1 {os.getloadavg()[0]:.2f}")
    print("| path | ms/step (median) | speed-up vs softmax |\n|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m * 1e3:.1f} | {soft / m:.2f}x |")
    before, now = med["based, feature space (before)"], med["based, Taylor kernel (now)"]
    print(f"now / before: {now / before:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description="Based: Taylor kernel against the feature-space kernel")
    ap.add_argument("--shapes", default="findings,long")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, fp32")
    for shape in args.shapes.split(","):
        bench(shape, args.repeats)


if __name__ == "__main__":
    main()
