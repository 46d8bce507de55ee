"""fp32 accuracy of the Heinsen kernel against float64, beside the reference formulation (issue 28).

    OMP_NUM_THREADS=1 python benchmarks/bench_heinsen_fp32.py [--T 512] [--seeds 3] [--chunks 16,64] [--grads]

Head size 32, batch 1, 4 heads, q, k and log V drawn N(0, std^2) (q and k the same std),
`--seeds` draws per point. For each point: the fp32 kernel (``log_attention``, one row per
chunk size) and Heinsen's reference formulation run in fp32 (logcumsumexp over
[B, H, T, h_k, h_v], ``bench_kernels.naive_log``), each against a float64 log-space
quadratic evaluation: "max" is the tests' metric max |o - o64| / max(|o64|, 1), worst over
seeds; "mean" is mean |o - o64|. Points where ours is above 1e-4 are marked "!".
--grads adds, per point, the gradient error of the fp32 kernel against the float64 kernel
(exact in float64): max |g - g64| / max |g64| for q, k and log V, worst over seeds, chunk
= the last of --chunks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import log_quadratic64, naive_log  # noqa: E402

from attnbench.kernels.chunked import log_attention, log_init_state  # noqa: E402

H_DIM, N_HEAD = 32, 4


def errors(o: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max relative-or-absolute error, mean absolute error) of o against the float64 ref."""
    d = (o.double() - ref).abs()  # (1, H, T, h)
    return float((d / ref.abs().clamp_min(1.0)).max()), float(d.mean())


def draw(T: int, qk_std: float, v_std: float, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [std * torch.randn(1, N_HEAD, T, H_DIM, generator=g) for std in (qk_std, qk_std, v_std)]  # (1, H, T, h)


@torch.no_grad()
def point(T: int, qk_std: float, v_std: float, chunks: list[int], seeds: int) -> dict[str, tuple[float, float]]:
    """Worst max error and worst mean error over seeds, per kernel ("reference", "chunk c")."""
    worst: dict[str, tuple[float, float]] = {}
    for seed in range(seeds):
        q, k, lv = draw(T, qk_std, v_std, seed)
        ref = log_quadratic64(q, k, lv)  # (1, H, T, h) float64
        runs = {"reference": naive_log(q, k, lv)}
        for c in chunks:
            runs[f"chunk {c}"] = log_attention(q, k, lv, log_init_state(1, N_HEAD, H_DIM, H_DIM), c)[0]
        for name, o in runs.items():
            mx, mean = errors(o, ref)
            old = worst.get(name, (0.0, 0.0))
            worst[name] = (max(old[0], mx), max(old[1], mean))
    return worst


def grad_errors(T: int, qk_std: float, v_std: float, chunk: int, seeds: int) -> list[float]:
    """Worst over seeds of max |g - g64| / max |g64| for q, k, log V (loss: o . w, w random)."""
    worst = [0.0, 0.0, 0.0]
    for seed in range(seeds):
        w = torch.randn(1, N_HEAD, T, H_DIM, generator=torch.Generator().manual_seed(100 + seed))  # (1, H, T, h)
        grads = {}
        for dt in (torch.float32, torch.float64):
            q, k, log_v = (t.to(dt).requires_grad_() for t in draw(T, qk_std, v_std, seed))  # (1, H, T, h) each
            o = log_attention(q, k, log_v, log_init_state(1, N_HEAD, H_DIM, H_DIM, dtype=dt), chunk)[0]
            (o * w.to(dt)).sum().backward()
            grads[dt] = [_grad(t).double() for t in (q, k, log_v)]
        for n, (g, g64) in enumerate(zip(grads[torch.float32], grads[torch.float64], strict=True)):
            worst[n] = max(worst[n], float((g - g64).abs().max() / g64.abs().max()))
    return worst


def _grad(t: torch.Tensor) -> torch.Tensor:
    """``t.grad``, which backward() has filled."""
    if t.grad is None:
        raise RuntimeError("no gradient: backward() did not reach this input")
    return t.grad


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--chunks", default="16,64")
    ap.add_argument("--qk", default="1,5,10,15,20,25,30", help="q, k stds")
    ap.add_argument("--v", default="1,20,30,50", help="log V stds")
    ap.add_argument("--grads", action="store_true", help="also the gradients' error (slower)")
    args = ap.parse_args()
    chunks = [int(c) for c in args.chunks.split(",")]
    print(
        f"torch {torch.__version__}, CPU, {torch.get_num_threads()} threads; T={args.T}, h={H_DIM}, "
        f"{N_HEAD} heads, {args.seeds} seeds; error = max |o - o64| / max(|o64|, 1) (mean |o - o64|)"
    )
    names = [f"chunk {c}" for c in chunks] + ["reference"]
    print(
        f"{'q,k std':>7} {'logV std':>8} "
        + " ".join(f"{n:>20}" for n in names)
        + (f"   grads q / k / logV (chunk {chunks[-1]})" if args.grads else "")
    )
    for qk in (float(x) for x in args.qk.split(",")):
        for v in (float(x) for x in args.v.split(",")):
            worst = point(args.T, qk, v, chunks, args.seeds)
            cells = []
            for n in names:
                mx, mean = worst[n]
                flag = "!" if mx > 1e-4 and n != "reference" else " "
                cells.append(f"{mx:9.1e}{flag}({mean:7.1e})")
            if args.grads:
                cells.append(" / ".join(f"{e:.1e}" for e in grad_errors(args.T, qk, v, chunks[-1], args.seeds)))
            print(f"{qk:7g} {v:8g} " + " ".join(f"{c:>20}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
