"""Performance and accuracy of the `linear` and `heinsen` variants (issue 5), CPU fp32.

    python benchmarks/bench_kernels.py [--quick] [--layers 1] [--chunks 32,64,128]

Batch 1, 4 heads, d_k = d_v = 32 (d_model 128), byte vocabulary, dropout 0; "backbone"
means the shared GPT-2 backbone with ``--layers`` layers (default 1). Prints:
  1. forward+backward peak memory at T (8192) of the attention kernel and of one whole
     mixer (same projections) against the straightforward reference formulation
     (linear: cumulative sum of outer products; heinsen: logcumsumexp over [B,H,T,h,h]);
  2. forward+backward time at T: kernel and mixer against that formulation, mixer and
     backbone against softmax (fused SDPA) in the same backbone;
  3. training-step time (forward + backward + AdamW) of the backbone against T = 1024 ...
     16384 and the fitted log-log slope;
  4. per-token decode time after a context of 16384 against 1024 (prefill by chunked step);
  5. max abs error against a float64 quadratic evaluation at T = 4096; Heinsen with q, k
     scaled 100x: finite, and its error against a float64 log-space quadratic at T = 1024.
  6. (--chunks) forward+backward time of the mixer per chunk size, to pick the default.
Times are medians over interleaved repeats after a warm-up (time.perf_counter); peak
memory is ``attnbench.experiments.speed.memory.measure_peak`` (fresh process, peak RSS added by one call).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from attnbench import Backbone, ModelConfig
from attnbench.experiments.speed.memory import measure_peak
from attnbench.kernels.chunked import linear_attention, linear_init_state, log_attention, log_init_state
from attnbench.plugins.attention.linear_model import feature_map
from attnbench.registry.loader import load_registry

D_MODEL, N_HEAD, H_DIM, VOCAB = 128, 4, 32, 256
VARIANTS = ("linear", "heinsen")


# ---- the straightforward reference formulations (what the issue asks to beat) ----------


def naive_linear(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Cumulative sum of outer products: O(T h_k h_v) memory."""
    S = (fk[..., :, None] * v[..., None, :]).cumsum(dim=2)  # (B, H, T, h_k, h_v)
    z = fk.cumsum(dim=2)  # (B, H, T, h_k)
    num = torch.einsum("bhtd,bhtde->bhte", fq, S)  # (B, H, T, h_v)
    return num / ((fq * z).sum(-1, keepdim=True) + eps)  # (B, H, T, h_v)


def naive_log(q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor) -> torch.Tensor:
    """Heinsen's reference formulation: logcumsumexp over [B, H, T, h_k, h_v]."""
    H_S = torch.logcumsumexp(k[..., :, None] + log_v[..., None, :], dim=2)  # (B, H, T, h_k, h_v)
    H_Z = torch.logcumsumexp(k, dim=2)  # (B, H, T, h_k)
    log_S = torch.logsumexp(q[..., :, None] + H_S, dim=-2)  # (B, H, T, h_v)
    return log_S - torch.logsumexp(q + H_Z, dim=-1, keepdim=True)  # (B, H, T, h_v)


def ours(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    B, H, _, h = q.shape
    if name == "linear":
        return linear_attention(feature_map(q), feature_map(k), v, linear_init_state(B, H, h, h), chunk, 1e-6)[0]
    return log_attention(q, k, v, log_init_state(B, H, h, h), chunk)[0]


def kernel(name: str, impl: str) -> Callable[..., torch.Tensor]:
    if impl == "ours":
        return lambda q, k, v: ours(name, q, k, v)
    if name == "linear":
        return lambda q, k, v: naive_linear(F.elu(q) + 1, F.elu(k) + 1, v)
    return naive_log


# ---- models -------------------------------------------------------------------------


def config(name: str, layers: int, context: int) -> ModelConfig:
    variant = load_registry().get(name)
    return ModelConfig(
        vocab_size=VOCAB,
        d_model=D_MODEL,
        n_layer=layers,
        n_head=N_HEAD,
        context=context,
        dropout=0.0,
        options=variant.make_options(None),
    )


def mixer(name: str, impl: str, T: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """One layer's mixer; impl "naive" keeps its projections and swaps the kernel."""
    torch.manual_seed(0)
    m = load_registry().get(name).build_mixer(config(name, 1, T), 0)
    if impl == "ours" or name == "softmax":
        return m
    attend = kernel(name, "naive")

    c_attn, c_proj = m.get_submodule("c_attn"), m.get_submodule("c_proj")

    def run(x: torch.Tensor) -> torch.Tensor:
        B, T_, D = x.shape
        q, k, v = (t.view(B, T_, N_HEAD, -1).transpose(1, 2) for t in c_attn(x).split(D, dim=2))  # (B, H, T, h)
        return c_proj(attend(q, k, v).transpose(1, 2).reshape(B, T_, D))  # (B, T, D)

    return run


def backbone(name: str, layers: int, context: int) -> Backbone:
    torch.manual_seed(0)
    return Backbone(config(name, layers, context), load_registry().get(name).build_mixer)


# ---- measurement helpers ----------------------------------------------------------------


K = TypeVar("K", bound=Hashable)  # what names the timed callables


def interleaved(fns: dict[K, Callable[[], object]], repeats: int) -> dict[K, tuple[float, float]]:
    """Median and IQR of each callable, run round-robin (shared machines drift)."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[K, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    out = {}
    for key, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        out[key] = (statistics.median(ts), q[2] - q[0])
    return out


def fwd_bwd(f: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        out = f(*inputs)
        out.backward(torch.ones_like(out))

    return run


def qkv(T: int, scale: float = 1.0, seed: int = 0, grad: bool = True) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(scale * torch.randn(1, N_HEAD, T, H_DIM, generator=g)).requires_grad_(grad) for _ in range(3)]


def memory_setup(name: str, level: str, impl: str, T: int) -> Callable[[], None]:
    """For measure_peak: one forward + backward of a kernel or a mixer (setup excluded).

    A warm-up at T = 64 first, so one-time lazy initialisation (thread pools, kernel
    workspaces) is not counted, without leaving a T-sized heap behind to be reused.
    """
    if level == "kernel":
        fwd_bwd(kernel(name, impl), *qkv(64))()
        return fwd_bwd(kernel(name, impl), *qkv(T))
    f = mixer(name, impl, T)
    fwd_bwd(f, torch.randn(1, 64, D_MODEL).requires_grad_())()
    x = torch.randn(1, T, D_MODEL, generator=torch.Generator().manual_seed(0)).requires_grad_()
    return fwd_bwd(f, x)


# ---- figures ----------------------------------------------------------------------------


def fig_memory(T: int) -> None:
    print(f"\n1. forward+backward peak memory at T={T} (MiB; measure_peak, fresh process)")
    print(f"{'variant':8} {'level':7} {'ours':>9} {'naive':>9} {'ours/naive':>11}  target <= 0.125")
    for name in VARIANTS:
        for level in ("kernel", "mixer"):
            peaks = {
                impl: measure_peak("bench_kernels:memory_setup", name=name, level=level, impl=impl, T=T)
                for impl in ("ours", "naive")
            }
            mib = {k: (p.bytes / 2**20 if p.bytes is not None else math.nan) for k, p in peaks.items()}
            method = peaks["ours"].method or peaks["ours"].status
            print(
                f"{name:8} {level:7} {mib['ours']:9.1f} {mib['naive']:9.1f} {mib['ours'] / mib['naive']:11.3f}"
                f"  ({method})"
            )
    peak = measure_peak("bench_kernels:memory_setup", name="softmax", level="mixer", impl="ours", T=T)
    print(f"{'softmax':8} {'mixer':7} {peak.bytes / 2**20 if peak.bytes else math.nan:9.1f}")


def fig_time(T: int, layers: int, repeats: int) -> None:
    print(f"\n2. forward+backward time at T={T} (s, median [IQR] of {repeats} interleaved repeats)")
    x = torch.randn(1, T, D_MODEL).requires_grad_()
    idx = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(0))
    soft_mixer = mixer("softmax", "ours", T)
    soft_bb = backbone("softmax", layers, T)
    for name in VARIANTS:
        q, k, v = qkv(T)
        bb = backbone(name, layers, T)
        fns = {
            "kernel ours": fwd_bwd(kernel(name, "ours"), q, k, v),
            "kernel naive": fwd_bwd(kernel(name, "naive"), q, k, v),
            "mixer ours": fwd_bwd(mixer(name, "ours", T), x),
            "mixer naive": fwd_bwd(mixer(name, "naive", T), x),
            "mixer softmax": fwd_bwd(soft_mixer, x),
            f"backbone L={layers} ours": lambda bb=bb: bb(idx, targets=idx).loss.backward(),
            f"backbone L={layers} softmax": lambda: soft_bb(idx, targets=idx).loss.backward(),
        }
        res = interleaved(fns, repeats)
        print(f"  {name}:")
        for key, (med, iqr) in res.items():
            print(f"    {key:24} {med:8.3f} [{iqr:.3f}]")
        r = lambda a, b, res=res: res[b][0] / res[a][0]  # noqa: E731
        print(
            f"    speedup: kernel vs naive {r('kernel ours', 'kernel naive'):.1f}x, mixer vs naive "
            f"{r('mixer ours', 'mixer naive'):.1f}x, mixer vs softmax {r('mixer ours', 'mixer softmax'):.2f}x, "
            f"backbone vs softmax {r(f'backbone L={layers} ours', f'backbone L={layers} softmax'):.2f}x"
            "  (targets: > 1x, >= 3x vs softmax)"
        )


def fig_slope(Ts: list[int], layers: int, repeats: int) -> None:
    print(f"\n3. training-step time (forward + backward + AdamW, backbone L={layers}) against T")
    print(f"{'variant':8} " + " ".join(f"{T:>8}" for T in Ts) + "   slope  (target <= 1.15)")
    for name in VARIANTS:
        model = backbone(name, layers, max(Ts))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        meds = []
        for T in Ts:
            idx = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(T))

            def step(model=model, opt=opt, idx=idx) -> None:
                model(idx, targets=idx).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            meds.append(interleaved({"step": step}, repeats)["step"][0])
        slope = float(np.polyfit(np.log(Ts), np.log(meds), 1)[0])
        print(f"{name:8} " + " ".join(f"{m:8.3f}" for m in meds) + f"   {slope:.3f}")


@torch.no_grad()
def fig_decode(contexts: list[int], layers: int, tokens: int, repeats: int) -> None:
    print(f"\n4. per-token decode time (backbone L={layers}; ms, median over {tokens} tokens x {repeats})")
    print(f"{'variant':8} " + " ".join(f"{'ctx ' + str(c):>10}" for c in contexts) + "   ratio  (target <= 1.3)")
    for name in (*VARIANTS, "softmax"):
        model = backbone(name, layers, max(contexts) + tokens + 1).eval()
        per = []
        for ctx in contexts:
            g = torch.Generator().manual_seed(ctx)
            state = model.init_state(1, ctx + tokens + 1)
            _, state = model.step(torch.randint(0, VOCAB, (1, ctx), generator=g), state)  # prefill
            nxt = torch.randint(0, VOCAB, (1, 1), generator=g)
            times = []
            for _ in range(repeats):
                s = state
                for _ in range(tokens):
                    t0 = time.perf_counter()
                    _, s = model.step(nxt, s)
                    times.append(time.perf_counter() - t0)
            per.append(statistics.median(times) * 1e3)
        note = "" if name != "softmax" else "  (KV cache, for contrast)"
        print(f"{name:8} " + " ".join(f"{p:10.3f}" for p in per) + f"   {per[-1] / per[0]:.2f}{note}")


def quadratic64(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The quadratic (T x T) formulation in float64, one head at a time."""
    q, k, v = q.double(), k.double(), v.double()
    T = q.shape[2]
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    outs = []
    for h in range(q.shape[1]):
        qh, kh, vh = q[0, h], k[0, h], v[0, h]  # (T, h)
        if name == "linear":
            a = ((F.elu(qh) + 1) @ (F.elu(kh) + 1).T) * causal  # (T, T)
            outs.append(a @ vh / (a.sum(-1, keepdim=True) + 1e-6))  # (T, h)
        else:
            a = (qh.exp() @ kh.exp().T) * causal  # (T, T) fine in float64 at unit scale
            outs.append((a @ vh.exp()).log() - a.sum(-1, keepdim=True).log())  # (T, h)
    return torch.stack(outs)[None]  # (1, H, T, h)


def log_quadratic64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: int = 128) -> torch.Tensor:
    """Heinsen's quadratic formulation fully in log space (any scale), float64, row blocks."""
    q, k, v = q.double()[0], k.double()[0], v.double()[0]  # (H, T, h)
    T = q.shape[1]
    outs = []
    for i in range(0, T, rows):
        s = torch.logsumexp(q[:, i : i + rows, None, :] + k[:, None, :, :], dim=-1)  # (H, r, T)
        pos = torch.arange(i, min(i + rows, T))[:, None]  # (r, 1)
        s = s.masked_fill(torch.arange(T)[None, :] > pos, float("-inf"))  # (H, r, T) causal
        num = torch.logsumexp(s[..., None] + v[:, None], dim=2)  # (H, r, h)
        outs.append(num - torch.logsumexp(s, dim=-1, keepdim=True))  # (H, r, h)
    return torch.cat(outs, dim=1)[None]  # (1, H, T, h)


@torch.no_grad()
def fig_error(T: int, T_log: int) -> None:
    print("\n5. max abs error of the fp32 chunked kernel against float64 (target <= 1e-4)")
    for name in VARIANTS:
        q, k, v = qkv(T, grad=False)
        err = (ours(name, q, k, v).double() - quadratic64(name, q, k, v)).abs().max().item()
        print(f"  {name:8} T={T}, q, k, v ~ N(0, 1): {err:.2e}")
    for scale in (1.0, 100.0):
        q, k, v = qkv(T_log, grad=False)
        y = ours("heinsen", scale * q, scale * k, v)
        err = (y.double() - log_quadratic64(scale * q, scale * k, v)).abs().max().item()
        q_big, k_big, v_big = qkv(T, grad=False)
        y_big = ours("heinsen", scale * q_big, scale * k_big, v_big)
        print(
            f"  heinsen  q, k x{scale:g}: finite at T={T}: {bool(torch.isfinite(y_big).all())}; "
            f"error vs float64 log-space quadratic at T={T_log}: {err:.2e}"
        )


def fig_chunks(T: int, chunks: list[int], repeats: int) -> None:
    print(f"\n6. mixer forward+backward time at T={T} by chunk size (s, median)")
    x = torch.randn(1, T, D_MODEL).requires_grad_()
    for name in VARIANTS:
        variant = load_registry().get(name)
        fns = {}
        for c in chunks:
            cfg = config(name, 1, T).replace(options=variant.make_options({"chunk_size": c}))
            torch.manual_seed(0)
            fns[c] = fwd_bwd(variant.build_mixer(cfg, 0), x)
        res = interleaved(fns, repeats)
        print(f"  {name:8} " + "  ".join(f"c={c}: {res[c][0]:.3f}" for c in chunks))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (T 2048, contexts 256/2048)")
    ap.add_argument("--layers", type=int, default=1, help="backbone layers (default 1)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--chunks", default="", help="comma-separated chunk sizes to compare (figure 6)")
    ap.add_argument("--only", default="1,2,3,4,5,6", help="comma-separated figure numbers")
    args = ap.parse_args()
    q = args.quick
    T_big = 2048 if q else 8192
    Ts = [256, 512, 1024, 2048] if q else [1024, 2048, 4096, 8192, 16384]
    repeats = args.repeats or (3 if q else 5)
    only = set(args.only.split(","))
    print(
        f"torch {torch.__version__}, CPU fp32, {torch.get_num_threads()} threads, batch 1, "
        f"d_model {D_MODEL}, {N_HEAD} heads (h={H_DIM}), default chunk size 64, autocast off"
        f"{', QUICK sizes' if q else ''}"
    )
    if "1" in only:
        fig_memory(T_big)
    if "2" in only:
        fig_time(T_big, args.layers, repeats)
    if "3" in only:
        fig_slope(Ts, args.layers, repeats)
    if "4" in only:
        fig_decode([256, 2048] if q else [1024, 16384], args.layers, 32, repeats)
    if "5" in only:
        fig_error(1024 if q else 4096, 256 if q else 1024)
    if "6" in only and args.chunks:
        fig_chunks(T_big, [int(c) for c in args.chunks.split(",")], repeats)


if __name__ == "__main__":
    main()
