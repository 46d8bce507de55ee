"""fp32 against float64 for the decaying recurrent mixers at large inputs (issue 44).

    python benchmarks/bench_decay_numerics.py [--scales 1,30,100] [--chunks 64,256,257] [--T 600]

For gated_deltanet, gla, mamba2 and retnet (d_model 64, 2 heads, seed 0): the same mixer
in fp32 and in float64, fed x * scale, x ~ N(0, 1) of shape (2, T, 64). Prints the relative
error max |y32 - y64| / max |y64| per scale and chunk size. Large inputs make the per-step
log decays large, so a chunk's cumulative log decay reaches 10^3..10^5: a decay taken as a
difference of two running sums then loses float32's digits; a segment sum does not.
Run it on two commits to compare a kernel before and after.
"""

from __future__ import annotations

import argparse

import torch

from attnbench import ModelConfig
from attnbench.registry.loader import load_registry

VARIANTS = ("gated_deltanet", "gla", "mamba2", "retnet")


def rel_error(name: str, scale: float, chunk: int, T: int) -> float:
    variant = load_registry().get(name)
    config = ModelConfig(
        vocab_size=256, d_model=64, n_layer=1, n_head=2, context=T, options=variant.make_options({"chunk_size": chunk})
    )
    torch.manual_seed(0)
    m32 = variant.build_mixer(config, 0).eval()
    m64 = variant.build_mixer(config, 0).eval()
    m64.load_state_dict(m32.state_dict())
    m64.double()
    x = torch.randn(2, T, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * scale  # (B, T, D)
    with torch.no_grad():
        y64 = m64(x)  # (B, T, D)
        y32 = m32(x.float()).double()  # (B, T, D)
    return float((y32 - y64).abs().max() / y64.abs().max())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,30,100")
    ap.add_argument("--chunks", default="64,256,257")
    ap.add_argument("--T", type=int, default=600)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    scales = [float(s) for s in args.scales.split(",")]
    chunks = [int(c) for c in args.chunks.split(",")]
    print(f"max |y32 - y64| / max |y64|, T {args.T}, batch 2, d_model 64, 2 heads")
    print("| variant | chunk | " + " | ".join(f"input x{s:g}" for s in scales) + " |")
    print("|---|---|" + "---|" * len(scales))
    for name in args.variants.split(","):
        for chunk in chunks:
            errs = [rel_error(name, s, chunk, args.T) for s in scales]
            print(f"| {name} | {chunk} | " + " | ".join(f"{e:.1e}" for e in errs) + " |")


if __name__ == "__main__":
    main()
