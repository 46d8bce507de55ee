"""Performance of the `additive` and `windowed` variants (issue 4) on CPU in fp32.

    python benchmarks/bench_additive.py [--quick] [--layers 2] [--threads 1]

Shared backbone, d_model 128, 4 heads, batch 1, byte vocabulary (256), dropout 0.
A training step here is forward + cross-entropy + backward (no optimizer update).
Prints:
  1. training-step time against T (1024 ... 16384) and the fitted log-log slope;
  2. windowed with every layer at k = 4 against k = 4096, T = 8192;
  3. speedup over the softmax baseline (SDPA) in the same backbone, T = 8192;
  4. per-token decode time after a context of 16384 against 1024;
  5. against the straightforward reference formulation (prefix-sum difference, plain
     autograd) on one bare mixer: max output difference, step time, peak memory at T=16384.
Times are medians over repeats after a warm-up: CPU time of this single-threaded process
(time.process_time; robust on a shared machine), wall time (time.perf_counter) in brackets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnbench import Backbone, ModelConfig
from attnbench.experiments.speed.memory import measure_peak
from attnbench.registry.loader import load_registry

D_MODEL, N_HEAD, VOCAB = 128, 4, 256


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> tuple[float, float]:
    """Median (CPU seconds of this process, wall seconds) per call after `warmup` calls.

    With one thread, process CPU time is the compute time and stays meaningful on a shared
    machine, where wall time also counts the time other processes hold the cores.
    """
    for _ in range(warmup):
        fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def fmt(t: tuple[float, float]) -> str:
    return f"{t[0] * 1e3:8.1f} ms ({t[1] * 1e3:.0f} wall)"


def make_model(name: str, layers: int, context: int, options: dict | None = None) -> Backbone:
    variant = load_registry().get(name)
    config = ModelConfig(
        vocab_size=VOCAB,
        d_model=D_MODEL,
        n_layer=layers,
        n_head=N_HEAD,
        context=context,
        options=variant.make_options(options),
    )
    torch.manual_seed(0)
    return Backbone(config, variant.build_mixer)


def train_step_time(model: Backbone, T: int, repeats: int) -> tuple[float, float]:
    idx = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(0))
    model.train()

    def step() -> None:
        model(idx, targets=idx).loss.backward()
        model.zero_grad(set_to_none=True)

    return median_time(step, repeats)


def slope(Ts: list[int], times: list[float]) -> float:
    xs, ys = [math.log(t) for t in Ts], [math.log(s) for s in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


@torch.no_grad()
def decode_times(model: Backbone, contexts: tuple[int, ...], tokens: int) -> list[tuple[float, float]]:
    """Median (CPU, wall) seconds per single-token step after prompts of each length.

    Each prompt is consumed in one step (parallel path); the single-token steps of the
    different contexts are interleaved so that load drifts hit them alike.
    """
    model.eval()
    gen = torch.Generator().manual_seed(0)
    runs = []
    for context in contexts:
        idx = torch.randint(0, VOCAB, (1, context + tokens), generator=gen)
        _, state = model.step(idx[:, :context], model.init_state(1, context + tokens))
        runs.append([idx[:, context:], state, [], []])
    for i in range(tokens):
        for run in runs:
            c0, w0 = time.process_time(), time.perf_counter()
            _, run[1] = model.step(run[0][:, i : i + 1], run[1])
            run[2].append(time.process_time() - c0)
            run[3].append(time.perf_counter() - w0)
    return [(statistics.median(cpu[5:]), statistics.median(wall[5:])) for _, _, cpu, wall in runs]


# --- the straightforward reference formulation (spec 2.2/2.3), plain autograd


def _ref_norm(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)  # (..., h)


def _ref_pool(x: torch.Tensor, w: torch.Tensor, s: float, k: int) -> torch.Tensor:
    T, h = x.size(1), x.size(-1)
    xn = _ref_norm(x)  # (B, T, H, h)
    e = torch.exp((xn * _ref_norm(w)).sum(-1) / h * s)  # (B, T, H)
    num, z = (e[..., None] * xn).cumsum(1), e.cumsum(1)  # (B, T, H, h), (B, T, H)
    if k < T:  # window = prefix sum minus the prefix sum k tokens earlier
        num = num - F.pad(num, (0, 0, 0, 0, k, 0))[:, :T]  # (B, T, H, h)
        z = z - F.pad(z, (0, 0, k, 0))[:, :T]  # (B, T, H)
    return num / z[..., None]  # (B, T, H, h) eps_compat off, as in our default


def reference_forward(m, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    B, T, D = x.shape
    qkv = x.to(dtype) @ m.qkv.weight.to(dtype).T  # (B, T, 3D)
    q, k, v = (t.reshape(B, T, N_HEAD, -1) for t in qkv.split(D, -1))  # (B, T, H, h)
    gq = _ref_pool(q, m.query_attn.to(dtype), m.spec.rescale, m.window)  # (B, T, H, h)
    gk = _ref_pool(gq * k, m.key_attn.to(dtype), m.spec.rescale, m.window)  # (B, T, H, h)
    return (gk * v).flatten(2)  # (B, T, D)


def bare_mixer(name: str, window: int | None, T: int) -> nn.Module:
    options = None if window is None else {"windows": [window]}
    return make_model(name, 1, T, options).get_submodule("blocks.0.mixer")


def peak_setup(name: str, window: int | None, T: int, impl: str) -> Callable[[], None]:
    """For attnbench.experiments.speed.memory.measure_peak: one forward + backward of a bare mixer."""
    mixer = bare_mixer(name, window, T)
    x = torch.randn(1, T, D_MODEL, generator=torch.Generator().manual_seed(0), requires_grad=True)
    forward = mixer if impl == "ours" else (lambda inp: reference_forward(mixer, inp))

    def run() -> None:
        forward(x).square().mean().backward()

    return run


def train_scaling(L: int, Ts: list[int], reps: int) -> None:
    print("\n## 1. training step (forward + loss + backward) against T; CPU time (wall)")
    for name, label in (
        ("additive", "additive (all layers global)"),
        ("windowed", f"windowed, rule 'seeds' {[4 * 2**i for i in range(L - 1)]} + global"),
    ):
        model = make_model(name, L, Ts[-1])
        times = [train_step_time(model, T, reps) for T in Ts]
        print(f"{label}: slope {slope(Ts, [t[0] for t in times]):.3f} (wall {slope(Ts, [t[1] for t in times]):.3f})")
        for T, t in zip(Ts, times, strict=True):
            print(f"    T={T:6d} {fmt(t)}")


def window_independence(L: int, T: int, reps: int) -> None:
    print(f"\n## 2. windowed, every layer at the same window, T={T}")
    k_big = T // 2
    win = {k: train_step_time(make_model("windowed", L, T, {"windows": [k] * L}), T, reps) for k in (4, k_big)}
    print(
        f"k=4: {fmt(win[4])}   k={k_big}: {fmt(win[k_big])}   ratio {win[k_big][0] / win[4][0]:.3f} "
        f"(wall {win[k_big][1] / win[4][1]:.3f})"
    )


def against_softmax(L: int, T: int, reps: int) -> None:
    print(f"\n## 3. against softmax (SDPA, is_causal) in the same backbone, T={T}")
    soft = train_step_time(make_model("softmax", L, T), T, max(2, reps // 2))
    add = train_step_time(make_model("additive", L, T), T, reps)
    wnd = train_step_time(make_model("windowed", L, T), T, reps)
    print(
        f"softmax {fmt(soft)}   additive {fmt(add)} x{soft[0] / add[0]:.1f}   "
        f"windowed {fmt(wnd)} x{soft[0] / wnd[0]:.1f}   (CPU-time ratios)"
    )


def decode_scaling(L: int, ctx_long: int) -> None:
    print("\n## 4. decode: median CPU time per single-token step after a prompt (200 steps, interleaved)")
    for name in ("additive", "windowed"):
        model = make_model(name, L, ctx_long + 256)
        short, long = decode_times(model, (1024, ctx_long), 200)
        print(
            f"{name:10s} context 1024: {short[0] * 1e3:.3f} ms   context {ctx_long}: {long[0] * 1e3:.3f} ms   "
            f"ratio {long[0] / short[0]:.2f} (wall {long[1] / short[1]:.2f})"
        )


def against_reference(T: int, reps: int) -> None:
    print(f"\n## 5. against the reference formulation (bare mixer, d {D_MODEL}, T={T}, forward + backward)")
    print("   max |ours - ref| on random inputs: ref in fp64 (faithfulness) and in fp32 (its own drift)")
    for name, window in (("additive", None), ("windowed", 4), ("windowed", 64)):
        label = "global" if window is None else f"window {window}"
        mixer = bare_mixer(name, window, T)
        with torch.no_grad():
            x = torch.randn(1, T, D_MODEL, generator=torch.Generator().manual_seed(1))
            ours = mixer(x).double()
            d64 = (ours - reference_forward(mixer, x, torch.float64)).abs().max().item()
            d32 = (ours - reference_forward(mixer, x)).abs().max().item()
        x.requires_grad_()
        ours_t = median_time(lambda mixer=mixer, x=x: mixer(x).square().mean().backward(), reps)
        ref_t = median_time(lambda mixer=mixer, x=x: reference_forward(mixer, x).square().mean().backward(), reps)
        mem = {
            impl: measure_peak("bench_additive:peak_setup", name=name, window=window, T=T, impl=impl)
            for impl in ("ours", "reference")
        }
        mb = {impl: f"{m.bytes / 2**20:.1f} MiB" if m.bytes is not None else m.status for impl, m in mem.items()}
        print(
            f"{label:10s} diff vs fp64 ref {d64:.1e}, vs fp32 ref {d32:.1e}   "
            f"step: ours {fmt(ours_t)}, ref {fmt(ref_t)}   "
            f"peak: ours {mb['ours']}, ref {mb['reference']} ({mem['ours'].method})"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="T up to 4096 and fewer repeats")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sections", default="1,2,3,4,5", help="comma-separated subset to run")
    args = ap.parse_args()
    sections = {int(x) for x in args.sections.split(",")}
    torch.set_num_threads(args.threads)
    L = args.layers
    Ts = [512, 1024, 2048, 4096] if args.quick else [1024, 2048, 4096, 8192, 16384]
    reps = 3 if args.quick else 5
    print(
        f"# CPU fp32, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"d_model {D_MODEL}, heads {N_HEAD}, layers {L}, batch 1, vocab {VOCAB}, dropout 0"
    )
    print(
        "# path: plugins/_additive_ops (blocked window scans, fp32 sums, hand-written backward); "
        "global sums: two-level scan with block 256"
    )
    if 1 in sections:
        train_scaling(L, Ts, reps)
    if 2 in sections:
        window_independence(L, Ts[-2], reps)
    if 3 in sections:
        against_softmax(L, Ts[-2], reps)
    if 4 in sections:
        decode_scaling(L, Ts[-1])
    if 5 in sections:
        against_reference(Ts[-1], reps)


if __name__ == "__main__":
    main()
