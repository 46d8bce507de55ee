"""GLA's per-channel intra-chunk scores, the two ways (issue 42): this checkout's kernel
(two broadcast products and a sum over d_k) against the three-operand einsum it replaced
(``torch.einsum("bhnid,bhnjd,bhndij->bhnij")``: without opt_einsum, torch ran it as a batch
of 1 x d_k matmuls, one per (i, j) pair). One process, one thread, interleaved rounds.

    python benchmarks/bench_gla_scores.py [--repeats 9]

Shapes: the findings shape (d 64, 2 heads: d_k 16, d_v 32; batch 64, T 64) and the long one
(d 128, 4 heads: d_k 32, d_v 32; batch 1, T 8192), both at GLA's default chunk (8). Per shape:
the largest output difference in float64 (the rewrite is exact up to rounding), then the median
ms of the kernel's forward + backward, each way, and new / old.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnbench.plugins.recurrent.gla_kernel as gla_kernel
from attnbench.plugins.recurrent.gla import GLAOptions

SHAPES = {"findings": (64, 2, 64, 16, 32), "long": (1, 4, 8192, 32, 32)}  # B, H, T, d_k, d_v


def einsum_kernel():
    """The kernel as it was: the same source with the einsum for the per-channel scores."""
    source = Path(gla_kernel.__file__).read_text()
    new = "scores = (q_d * decay * k_d).sum(dim=-3)"
    assert new in source, "the kernel changed: update this benchmark"
    old = source.replace(new, 'scores = torch.einsum("bhnid,bhnjd,bhndij->bhnij", qc, kc, decay)')
    namespace: dict = {"__name__": "gla_kernel_einsum"}
    exec(compile(old, "gla_kernel_einsum", "exec"), namespace)
    return namespace["gated_linear_attention"]


def inputs(shape: str, dtype: torch.dtype) -> list[torch.Tensor]:
    B, H, T, d_k, d_v = SHAPES[shape]
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, H, T, d_k, generator=g, dtype=dtype) for _ in range(2))  # (B, H, T, d_k)
    v = torch.randn(B, H, T, d_v, generator=g, dtype=dtype)  # (B, H, T, d_v)
    log_decay = F.logsigmoid(torch.randn(B, H, T, d_k, generator=g, dtype=dtype)) / 16  # (B, H, T, d_k) <= 0
    return [t.requires_grad_() for t in (q, k, v, log_decay)]


def call(kernel, args: list[torch.Tensor], backward: bool) -> torch.Tensor:
    q, k, v, g = args
    state = torch.zeros(q.shape[0], q.shape[1], q.shape[-1], v.shape[-1], dtype=q.dtype)  # (B, H, d_k, d_v)
    o, _ = kernel(q, k, v, g, state, GLAOptions().chunk_size, q.shape[-1] ** -0.5)
    if backward:
        o.sum().backward()
    return o


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--shapes", default="findings,long")
    args = parser.parse_args()
    torch.set_num_threads(1)
    kernels = {"einsum (old)": einsum_kernel(), "broadcast (new)": gla_kernel.gated_linear_attention}
    print(f"torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.1f}")
    for shape in args.shapes.split(","):
        exact = inputs(shape, torch.float64)
        diff = (call(kernels["einsum (old)"], exact, False) - call(kernels["broadcast (new)"], exact, False)).abs()
        data = inputs(shape, torch.float32)
        times: dict[str, list[float]] = {name: [] for name in kernels}
        for kernel in kernels.values():
            call(kernel, data, True)  # warm-up
        for _ in range(args.repeats if shape == "findings" else max(1, args.repeats // 3)):
            for name, kernel in kernels.items():
                start = time.perf_counter()
                call(kernel, data, True)
                times[name].append(time.perf_counter() - start)
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        old, new = ms["einsum (old)"], ms["broadcast (new)"]
        print(f"{shape}: float64 max |difference| {diff.max().item():.1e}; forward + backward ms: ", end="")
        print(f"einsum {old:.1f}, broadcast {new:.1f}, new / old {new / old:.2f}")


if __name__ == "__main__":
    main()
