"""Future attention: lean path vs the explicit reference formulation (one layer, training).

    python benchmarks/bench_future.py [--quick]

Measures one ``FutureAttention`` mixer (not the whole backbone) in training mode, forward
plus backward of  mean(y^2) + coeff * aux,  for the lean path (``attnbench.plugins.future_model``: blocked
causal kernel with LSE, O(T fd) band, band target) and the straightforward explicit
formulation (``tests.references.future_reference``: full (T, T_w) matrices). A plain softmax layer
(fused SDPA, no future band, no auxiliary loss) is listed for scale.
Peak memory: ``attnbench.experiments.speed.memory.measure_peak`` (fresh process, peak added by one call).
Time: ``time.perf_counter`` around whole calls after warm-up, implementations interleaved;\nmedian, min and max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spawned children import this file
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.references

from attnbench import MixerOutput, ModelConfig  # noqa: E402
from attnbench.experiments.speed.memory import measure_peak  # noqa: E402
from attnbench.plugins import future, future_model  # noqa: E402
from attnbench.plugins.kernels import lse_merge  # noqa: E402
from attnbench.plugins.softmax_model import SoftmaxAttention  # noqa: E402
from tests.references.future_reference import reference_forward  # noqa: E402

IMPLS = ("lean", "explicit", "softmax")


def setup(impl: str, T: int, d: int, heads: int, fd: int, batch: int, threads: int, device: str = "cpu"):
    """Build one layer and its input; return a zero-arg callable doing forward + backward."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = ModelConfig(
        d_model=d, n_head=heads, context=T, n_layer=1, bias=False, options=future.FutureOptions(future_dim=fd)
    )
    mixer = (SoftmaxAttention if impl == "softmax" else future_model.FutureAttention)(config, 0)
    mixer = mixer.to(device).train()
    x = torch.randn(batch, T, d, device=device, requires_grad=True)
    forward = (lambda x: reference_forward(mixer, x)) if impl == "explicit" else mixer

    def run() -> None:
        out = forward(x)
        loss = out.y.square().mean() if isinstance(out, MixerOutput) else out.square().mean()
        if isinstance(out, MixerOutput):
            loss = loss + sum(a.weight * a.value for a in out.aux)
        loss.backward()
        mixer.zero_grad(set_to_none=True)
        x.grad = None

    return run


def time_calls(runs: dict, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per call; implementations interleaved round-robin, so that load from other
    processes on a shared machine falls on all of them alike."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--quick", action="store_true", help="T=512, fewer repeats")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    shape: dict[str, Any] = dict(T=512 if args.quick else 2048, d=128, heads=4, fd=50, batch=1, threads=args.threads)
    warmup, repeats = (1, 3) if args.quick else (2, 7)
    print(
        f"# future attention, one layer, training forward+backward, fp32 CPU, "
        f"torch {torch.__version__}, threads {args.threads}"
    )
    print(
        f"# T={shape['T']} batch={shape['batch']} d={shape['d']} heads={shape['heads']} "
        f"future_dim={shape['fd']} context=T; lean blocks: causal "
        f"{lse_merge.query_block_rows(shape['batch'], shape['heads'], shape['T'])} rows, "
        f"band {lse_merge.BAND_BLOCK} rows"
    )
    peaks = {impl: measure_peak("bench_future:setup", impl=impl, **shape) for impl in IMPLS}
    times = time_calls({impl: setup(impl, **shape) for impl in IMPLS}, warmup, repeats)
    rows = {}
    for impl in IMPLS:
        peak, ts = peaks[impl], times[impl]
        med = statistics.median(ts)
        rows[impl] = (peak, med)
        mib = f"{peak.bytes / 2**20:10.1f}" if peak.bytes is not None else f"{peak.status:>10}"
        print(
            f"{impl:9s} peak {mib} MiB ({peak.method})   step {med * 1e3:8.1f} ms "
            f"(min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f}, n={repeats})"
        )
    (lp, lt), (ep, et) = rows["lean"], rows["explicit"]
    if lp.bytes and ep.bytes:
        print(f"lean / explicit: memory {lp.bytes / ep.bytes:.3f} (target <= 0.333), time {lt / et:.3f} (target <= 1)")


if __name__ == "__main__":
    main()
