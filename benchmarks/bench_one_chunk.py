"""Training from no state against training from an explicit zero state (issue 42), one process.

    python benchmarks/bench_one_chunk.py [--shapes findings,compare] [--repeats 7]

Up to one chunk (T <= chunk: the CPU suites' T 25..64 against the chunk 64 of linear, Based,
Mamba2 and the delta rule), training runs the masked quadratic form alone: no chunk summary,
no carried-state read, no final state (for the delta rule, the WY solve takes V alone); and
the sliding window (swa, Based's local part) from an empty cache with T <= w is SDPA's causal
attention instead of the blocked kernel's c + w - 1 keys per query block ("window" rows:
"state" is the blocked kernel, ``window_kernel.SDPA_UP_TO_WINDOW`` off). Here each model is built
once and its train step (forward + backward, one thread) alternates between the two paths,
step by step: "state" is the previous forward, which passed the zero state (the ``step`` path,
kept for decoding), "none" the training path. Prints the median ms/step of each and none/state.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from attnbench import Backbone, ModelConfig, linear_attention, linear_init_state
from attnbench.plugins import linear_model
from attnbench.plugins.recurrent import based_model, deltanet_model, mamba2_model, window_kernel
from attnbench.plugins.recurrent.delta_kernel import delta_rule
from attnbench.registry.loader import load_registry

SHAPES = {  # name: (d_model, n_layer, n_head, T, batch)
    "findings": (64, 2, 2, 64, 64),  # bench_mixers' findings shape
    "compare": (128, 4, 4, 64, 16),  # compare.yaml's text experiment
}


def _linear_from_zero(self, x: torch.Tensor) -> torch.Tensor:
    fq, fk, v = self._heads(x)  # (B, H, T, F), (B, H, T, F), (B, H, T, h)
    B, H, _, h = v.shape
    y, _ = linear_attention(
        fq, fk, v, linear_init_state(B, H, fk.shape[-1], h, x.device, fk.dtype), self.chunk_size, self.eps
    )
    return self._merge(y)  # (B, T, D)


def _delta_from_zero(self, x: torch.Tensor) -> torch.Tensor:
    q, k, v, beta, g, _ = self._heads(x, None)
    s0 = torch.zeros(x.shape[0], self.n_head, self.head_dim, self.head_dim)  # (B, H, d_k, d_v)
    o, _ = delta_rule(q, k, v, beta, g, s0, self.chunk_size, self.head_dim**-0.5)  # (B, H, T, h)
    return self._out(x, o)  # (B, T, D)


def _mix_from_zero(self, x: torch.Tensor) -> torch.Tensor:
    return self._mix(x, self.init_state(x.shape[0], x.shape[1], x.device, x.dtype))[0]  # (B, T, D)


PATHS = {  # variant: (module class, forward from an explicit zero state)
    "linear": (linear_model.LinearAttention, _linear_from_zero),
    "based": (based_model.Based, _mix_from_zero),
    "mamba2": (mamba2_model.Mamba2, _mix_from_zero),
    "deltanet": (deltanet_model.DeltaNet, _delta_from_zero),
    "gated_deltanet": (deltanet_model.DeltaNet, _delta_from_zero),  # inherits DeltaNet's forward
}


def _alternate(model: Backbone, x: torch.Tensor, paths: dict, repeats: int) -> dict[str, float]:
    """Median seconds per train step of each path, the paths alternating step by step."""
    times: dict[str, list[float]] = {p: [] for p in paths}
    for r in range(repeats + 1):
        for path, select in paths.items():
            select()
            t0 = time.perf_counter()
            model(x, x).loss.backward()
            model.zero_grad(set_to_none=True)
            if r:  # the first round warms up
                times[path].append(time.perf_counter() - t0)
    return {p: statistics.median(ts) for p, ts in times.items()}


def _sdpa(on: bool) -> None:
    window_kernel.SDPA_UP_TO_WINDOW = on


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="findings,compare")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    registry = load_registry()
    print(f"one thread; load average {os.getloadavg()[0]:.1f}")
    for shape in args.shapes.split(","):
        d, L, H, T, batch = SHAPES[shape]
        x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
        config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0)
        print(f"\n{shape}: d {d}, {L} layers, {H} heads, T {T}, batch {batch}")
        print(f"{'variant':16s} {'state ms':>9s} {'none ms':>9s} {'none/state':>10s}")
        rows = [(name, cls, from_zero) for name, (cls, from_zero) in PATHS.items()]
        rows += [(f"{name} (window)", None, None) for name in ("swa", "based")]
        for label, cls, from_zero in rows:
            torch.manual_seed(0)
            model = Backbone(config, registry.get(label.split()[0]).build_mixer).train()
            if cls is None:  # the window: the blocked kernel against SDPA
                t = _alternate(model, x, {"state": lambda: _sdpa(False), "none": lambda: _sdpa(True)}, args.repeats)
            else:
                none_forward = cls.forward
                paths = {"state": lambda c=cls, f=from_zero: setattr(c, "forward", f),
                         "none": lambda c=cls, f=none_forward: setattr(c, "forward", f)}  # fmt: skip
                t = _alternate(model, x, paths, args.repeats)
                cls.forward = none_forward
            print(f"{label:16s} {t['state'] * 1e3:9.1f} {t['none'] * 1e3:9.1f} {t['none'] / t['state']:10.2f}")
        _sdpa(True)


if __name__ == "__main__":
    main()
