"""The short causal convolution's CPU path against conv1d's (issue 42), one thread, one process.

    python benchmarks/bench_short_conv.py [--repeats 21]

Forward + backward of SiLU(conv(xx)) at the shapes DeltaNet / Gated DeltaNet (3 d channels, no
bias) and Mamba2 (its conv_dim channels, bias) train at in bench_mixers.py's findings and long
shapes. "conv1d" is the path before: a channels-first copy, conv1d, a copy back; "ours" is
attnbench.plugins.kernels.short_conv. The two alternate call by call; best of --repeats each.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from attnbench.plugins.kernels.short_conv import causal_depthwise_conv

SHAPES = {  # name: (B, T, C, bias)
    "findings, deltanet (3 x d 64)": (64, 64, 192, False),
    "findings, mamba2 (d 64)": (64, 64, 384, True),
    "long, deltanet (3 x d 128)": (1, 8192, 384, False),
    "long, mamba2 (d 128)": (1, 8192, 512, True),
}
K = 4


def conv1d_path(xx: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    y = F.conv1d(xx.transpose(1, 2).contiguous(), w, b, groups=w.shape[0])  # (B, C, T)
    return F.silu(y.transpose(1, 2).contiguous())  # (B, T, C)


def ours(xx: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.silu(causal_depthwise_conv(xx, w, b))  # (B, T, C)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    rows = []
    for name, (B, T, C, bias) in SHAPES.items():
        g = torch.Generator().manual_seed(0)
        xx, w = torch.randn(B, T + K - 1, C, generator=g), torch.randn(C, 1, K, generator=g)  # (B, T', C), (C, 1, K)
        b = torch.randn(C, generator=g) if bias else None
        best = {"conv1d": float("inf"), "ours": float("inf")}
        for i in range(args.repeats + 1):  # round 0 warms up
            for label, fn in (("conv1d", conv1d_path), ("ours", ours)):
                leaves = [t.clone().requires_grad_(True) for t in (xx, w)]
                start = time.perf_counter()
                fn(leaves[0], leaves[1], b).sum().backward()
                if i:
                    best[label] = min(best[label], time.perf_counter() - start)
        rows.append((name, best["conv1d"], best["ours"]))
    print(f"best of {args.repeats}, one thread, load1 {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print("| shape (B, T, C) | conv1d ms | ours ms | ours / conv1d |")
    print("|---|---|---|---|")
    for name, old, new in rows:
        print(f"| {name} | {old * 1e3:.2f} | {new * 1e3:.2f} | {new / old:.2f} |")


if __name__ == "__main__":
    main()
