"""The blocked sliding-window kernel (swa, Based's window part), the two ways (issue 42): each
query block's keys as the blocks before it copied side by side (this checkout) against one
unfolded view of overlapping windows (``unfolded``, the kernel before: its backward scatters
the overlaps back, ``unfold_backward``). One process, one thread, interleaved rounds.

    python benchmarks/bench_window_blocks.py [--repeats 9]

Shapes (B, H, T, h, window, block): T 8192 at swa's and Based's defaults (window 64, block
64), a wider window (128), and a CPU-suite batch (64 x T 256). Per shape: the largest output
difference in float64, the median ms of forward + backward each way, and new / old.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnbench.plugins.recurrent.window_kernel import window_attention, window_init_cache

SHAPES = ((1, 4, 8192, 32, 64, 64), (1, 4, 8192, 32, 128, 64), (64, 2, 256, 32, 64, 64))


def unfolded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: int, block: int) -> torch.Tensor:
    """The kernel before, from an empty cache: block n reads padded keys [n c, n c + c + w - 1)
    as one unfolded (overlapping) view. q, k, v (B, H, T, h) -> (B, H, T, h)."""
    T, h = q.shape[2:]
    c = min(block, T)
    N, S = -(-T // c), c + w - 1
    front, back = w - 1, N * c - T
    kb = F.pad(k, (0, 0, front, back)).unfold(2, S, c)  # (B, H, N, h, S)
    vb = F.pad(v, (0, 0, front, back)).unfold(2, S, c).transpose(-1, -2)  # (B, H, N, S, h)
    qb = F.pad(q, (0, 0, 0, back)).unflatten(2, (N, c))  # (B, H, N, c, h)
    scores = (qb @ kb) * h**-0.5  # (B, H, N, c, S)
    i, r = torch.arange(c)[:, None], torch.arange(S)[None, :]  # (c, 1), (1, S)
    start = torch.arange(N)[:, None, None] * c  # (N, 1, 1)
    seen = (r >= i) & (r <= i + w - 1) & (start + r >= front)  # (N, c, S)
    p = scores.masked_fill(~seen, float("-inf")).softmax(dim=-1)  # (B, H, N, c, S)
    return (p @ vb).flatten(2, 3)[:, :, :T]  # (B, H, T, h)


def blocked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: int, block: int) -> torch.Tensor:
    B, H, _, h = q.shape
    return window_attention(q, k, v, window_init_cache(B, H, h, dtype=q.dtype), w, block)[0]


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description="sliding-window kernel: blocks side by side against unfolded")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ways = {"unfolded (old)": unfolded, "blocks (new)": blocked}
    print(f"torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.1f}")
    print("| B, H, T, h | window | block | float64 max diff | unfolded ms | blocks ms | new / old |")
    print("|---|---|---|---|---|---|---|")
    for B, H, T, h, w, c in SHAPES:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, H, T, h, generator=gen, dtype=torch.float64) for _ in range(3))
        diff = (unfolded(q, k, v, w, c) - blocked(q, k, v, w, c)).abs().max().item()
        data = tuple(t.float().requires_grad_() for t in (q, k, v))
        for kernel in ways.values():
            kernel(data[0], data[1], data[2], w, c).sum().backward()  # warm-up
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeats):
            for name, kernel in ways.items():

                def step(kernel=kernel, data=data, w=w, c=c) -> None:
                    kernel(data[0], data[1], data[2], w, c).sum().backward()

                times[name].append(timed(step))
        old, new = (1e3 * statistics.median(times[name]) for name in ways)
        print(f"| {B}, {H}, {T}, {h} | {w} | {c} | {diff:.1e} | {old:.1f} | {new:.1f} | {new / old:.2f} |")


if __name__ == "__main__":
    main()
