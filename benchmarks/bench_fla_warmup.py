"""What `kernel: fla` costs on first use, and its warm train-step curve against SDPA (CUDA).

    python benchmarks/bench_fla_warmup.py [--variants linear,gla] [--lengths 1024,...] [--budget 280]

Why: in the GPU checks of 2026-11-27 every fla gate and speed point ran out of its time limit
(30 s, then 120 s per gate, 60 s per speed point). fla autotunes each Triton kernel on first
use (48 configurations for the chunk-state kernel alone), once per head size and dtype; the
compiled kernels and the chosen configurations are cached on disk for later processes.

One process, the speed experiment's model (d_model 768, 2 layers, 12 heads, batch 1, bf16
autocast, byte vocabulary). Per fla variant, as JSON lines (flushed, so a run stopped at its
time box keeps what it measured):
  first    seconds of the first forward + backward at T 1024 (compilation and autotuning)
  second   the same call again (warm)
  new_T    the first call at T 4096 (do new lengths recompile?)
  curve    median train-step ms over 5 interleaved rounds, softmax (SDPA) and the variant
  fp32     linear only: max |fla - ours| / max |ours| of fp32 logits (d 64, T 320), with
           Triton's fp32 dot precision as attnbench sets it (follow torch's: ieee)
Steps that would start after --budget seconds are printed as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.registry.loader import load_registry

START = time.monotonic()


def emit(**row) -> None:
    print(json.dumps({"t_s": round(time.monotonic() - START, 1), **row}), flush=True)


def build(name: str, kernel: str | None, d: int, L: int, H: int, T: int) -> Backbone:
    variant = load_registry().get(name)
    options = variant.make_options({"kernel": kernel} if kernel else {})
    config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0, options=options)
    torch.manual_seed(0)
    return Backbone(config, variant.build_mixer).cuda().train()


def step_s(model: Backbone, T: int) -> float:
    """Seconds of one bf16-autocast forward + backward at length T (synchronised)."""
    x = torch.randint(0, 256, (1, T), device="cuda")  # (1, T)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, x).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def fp32_agreement() -> float:
    """max |fla - ours| / max |ours| of fp32 logits, the gate's incremental check's shape."""
    ours, fla = build("linear", "chunked", 64, 2, 4, 320), build("linear", "fla", 64, 2, 4, 320)
    fla.load_state_dict(ours.state_dict())
    x = torch.randint(0, 256, (2, 320), device="cuda")  # (2, T)
    with torch.no_grad():
        a, b = ours(x).logits, fla(x).logits  # (2, T, V)
    return ((a - b).abs().max() / a.abs().max()).item()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--variants", default="linear,gla,gated_deltanet,mamba2")
    p.add_argument("--lengths", default="1024,4096,16384,32768")
    p.add_argument("--budget", type=float, default=280.0)
    args = p.parse_args()
    import fla  # noqa: F401  (its absence is this benchmark's error)
    import triton

    precision = torch.get_float32_matmul_precision()
    emit(step="env", torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name(),
         fp32_precision=precision, triton_f32=os.environ.get("TRITON_F32_DEFAULT"))  # fmt: skip
    lengths = [int(t) for t in args.lengths.split(",")]
    d, L, H = 768, 2, 12
    soft = build("softmax", None, d, L, H, max(lengths))
    step_s(soft, 1024)
    for name in args.variants.split(","):
        if time.monotonic() - START > args.budget:
            emit(step="skipped", variant=name, reason="budget spent")
            continue
        model = build(name, "fla", d, L, H, max(lengths))
        emit(step="first", variant=name, s=step_s(model, 1024), triton_f32=os.environ.get("TRITON_F32_DEFAULT"))
        emit(step="second", variant=name, s=step_s(model, 1024))
        emit(step="new_T", variant=name, s=step_s(model, 4096))
        for T in lengths:
            if time.monotonic() - START > args.budget:
                emit(step="skipped", variant=name, T=T, reason="budget spent")
                break
            times: dict[str, list[float]] = {"softmax": [], name: []}
            for m in (soft, model):  # warm-up at this length
                step_s(m, T)
            for _ in range(5):
                times["softmax"].append(step_s(soft, T))
                times[name].append(step_s(model, T))
            emit(step="curve", variant=name, T=T, **{f"{k}_ms": 1e3 * statistics.median(v) for k, v in times.items()})
        del model
        torch.cuda.empty_cache()
        if name == "linear" and time.monotonic() - START < args.budget:
            t0 = time.monotonic()
            emit(step="fp32", variant=name, rel_diff=fp32_agreement(), s=time.monotonic() - t0,
                 triton_f32=os.environ.get("TRITON_F32_DEFAULT"))  # fmt: skip


if __name__ == "__main__":
    main()
