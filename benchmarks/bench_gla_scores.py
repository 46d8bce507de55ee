"""GLA's per-channel intra-chunk scores, the two ways (issue 42): one matmul of q e^G and
k e^-G per chunk (this checkout, for chunks whose decay spans at most e^-FACTOR_SPAN) against
the pairwise (c, c, d_k) exponents every chunk took before (``pairwise_scores``, the previous
kernel's two broadcast products and sum, patched in). One process, one thread, interleaved.

    python benchmarks/bench_gla_scores.py [--repeats 9] [--shapes findings,long] [--chunk 16]

Shapes: the findings shape (d 64, 2 heads: d_k 16, d_v 32; batch 64, T 64) and the long one
(d 128, 4 heads: d_k 32, d_v 32; batch 1, T 8192), GLA's gate at init (log sigmoid / 16, every
chunk narrow). Per shape: the largest output difference in float64 (both are exact up to
rounding), then the median ms of the kernel's forward + backward each way, and new / old.
(Before the factorised form this file timed the broadcast pairwise scores against a
three-operand einsum: 0.88x and 0.91x, 2026-11-27.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import attnbench.plugins.recurrent.gla_kernel as gla_kernel

SHAPES = {"findings": (64, 2, 64, 16, 32), "long": (1, 4, 8192, 32, 32)}  # B, H, T, d_k, d_v
FACTORISED = gla_kernel._channel_scores


def pairwise_scores(qc: torch.Tensor, kc: torch.Tensor, gc: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """The scores as every chunk computed them before: sum_d q_id exp(G_id - G_jd) k_jd, pairwise."""
    q_d = qc.transpose(-1, -2).unsqueeze(-1)  # (B, H, N, d_k, c, 1) q_id
    k_d = kc.transpose(-1, -2).unsqueeze(-2)  # (B, H, N, d_k, 1, c) k_jd
    return (q_d * gla_kernel.pair_decay(gc) * k_d).sum(dim=-3)  # (B, H, N, c, c)


def inputs(shape: str, dtype: torch.dtype) -> list[torch.Tensor]:
    B, H, T, d_k, d_v = SHAPES[shape]
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, H, T, d_k, generator=g, dtype=dtype) for _ in range(2))  # (B, H, T, d_k)
    v = torch.randn(B, H, T, d_v, generator=g, dtype=dtype)  # (B, H, T, d_v)
    log_decay = F.logsigmoid(torch.randn(B, H, T, d_k, generator=g, dtype=dtype)) / 16  # (B, H, T, d_k) <= 0
    return [t.requires_grad_() for t in (q, k, v, log_decay)]


def call(scores: Callable, args: list[torch.Tensor], chunk: int, backward: bool) -> torch.Tensor:
    gla_kernel._channel_scores = scores
    q, k, v, g = args
    state = torch.zeros(q.shape[0], q.shape[1], q.shape[-1], v.shape[-1], dtype=q.dtype)  # (B, H, d_k, d_v)
    o, _ = gla_kernel.gated_linear_attention(q, k, v, g, state, chunk, q.shape[-1] ** -0.5)
    if backward:
        o.sum().backward()
    return o


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description="GLA's per-channel scores: factorised against pairwise")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--shapes", default="findings,long")
    parser.add_argument("--chunk", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ways = {"pairwise (old)": pairwise_scores, "factorised (new)": FACTORISED}
    print(f"torch {torch.__version__}, 1 thread, chunk {args.chunk}, load average {os.getloadavg()[0]:.1f}")
    for shape in args.shapes.split(","):
        exact = inputs(shape, torch.float64)
        diff = (call(pairwise_scores, exact, args.chunk, False) - call(FACTORISED, exact, args.chunk, False)).abs()
        data = inputs(shape, torch.float32)
        for scores in ways.values():
            call(scores, data, args.chunk, True)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeats if shape == "findings" else max(1, args.repeats // 3)):
            for name, scores in ways.items():
                times[name].append(timed(lambda scores=scores, data=data: call(scores, data, args.chunk, True)))
        gla_kernel._channel_scores = FACTORISED
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        old, new = ms["pairwise (old)"], ms["factorised (new)"]
        print(f"{shape}: float64 max |difference| {diff.max().item():.1e}; forward + backward ms: ", end="")
        print(f"pairwise {old:.1f}, factorised {new:.1f}, new / old {new / old:.2f}")


if __name__ == "__main__":
    main()
