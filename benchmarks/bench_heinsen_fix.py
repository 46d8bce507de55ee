"""Heinsen kernel before and after issue 17, side by side in one run (CPU fp32).

    python benchmarks/bench_heinsen_fix.py [--T 8192] [--repeats 5]

"before" is the kernel as it was (kept here only, copied verbatim from
plugins/kernels/chunked.py (now harness/kernels/chunked.py) at 3456515): one log V maximum per chunk (later positions
included) and clamp_min(tiny). "after" is ``attnbench.kernels.chunked.log_attention``.
Batch 1, 4 heads, h = 32 (d_model 128), chunk 64, as benchmarks/bench_kernels.py. Prints:
  1. forward+backward peak memory of the kernel at T against the straightforward
     formulation (logcumsumexp over [B, H, T, h_k, h_v]); target after/naive <= 1/8;
  2. training-step time (forward + backward + AdamW, backbone L=1) at T, before and after
     interleaved, medians; target after <= 1.2 x before;
  3. accuracy: max relative error against a float64 log-space quadratic evaluation with
     log V of std 1/20/50 and an early token with k = -150, log V = 200 (T = 1024), and
     the largest change of outputs before position 600 when log V at 600 is raised by 200.
Run it with `uptime` beside it: the machine is shared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import D_MODEL, H_DIM, N_HEAD, VOCAB, backbone, fwd_bwd, log_quadratic64, naive_log, qkv  # noqa: E402

from attnbench.experiments.speed.memory import measure_peak  # noqa: E402
from attnbench.kernels.chunked import (  # noqa: E402,F401
    LEVEL,
    _chunks,
    _exclusive,
    _future,
    _unchunk,
    _with_ones,
    log_attention,
    log_init_state,
)
from attnbench.plugins import heinsen_model  # noqa: E402


@dataclass(frozen=True)
class OldLogState:
    """Recurrent state of log-space (phi = exp) attention, stored max-shifted (fp32).

    The true sums are S = s * exp(m_k[:, None] + m_v[None, :]) and Z = z * exp(m_k): the
    running maxima keep every stored entry <= the number of tokens seen.
    """

    s: torch.Tensor  # (B, H, h_k, h_v) sum_j exp(k_j - m_k) exp(log v_j - m_v)^T
    z: torch.Tensor  # (B, H, h_k) sum_j exp(k_j - m_k)
    m_k: torch.Tensor  # (B, H, h_k) running max of k per channel; -inf before any token
    m_v: torch.Tensor  # (B, H, h_v) running max of log V per channel; -inf before any token


def old_log_init_state(batch: int, n_head: int, h_k: int, h_v: int, device=None, dtype=None) -> OldLogState:
    ninf, f32 = float("-inf"), dict(device=device, dtype=torch.float32)
    return OldLogState(
        torch.zeros(batch, n_head, h_k, h_v, **f32),  # (B, H, h_k, h_v)
        torch.zeros(batch, n_head, h_k, **f32),  # (B, H, h_k)
        torch.full((batch, n_head, h_k), ninf, **f32),  # (B, H, h_k)
        torch.full((batch, n_head, h_v), ninf, **f32),
    )  # (B, H, h_v)


def old_log_attention(
    q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor, state: OldLogState, chunk: int
) -> tuple[torch.Tensor, OldLogState]:
    """BEFORE issue 17, verbatim (only renamed): Heinsen's causal log-space attention
    (arXiv 2404.05843, eq. 12-13), chunkwise:

        o_i = log sum_{j<=i} exp(LSE_d(q_id + k_jd) + log V_j) - log sum_{j<=i} exp(LSE_d(q_id + k_jd))

    i.e. the log of linear attention with phi = exp and values exp(log V). q, k (B, H, T,
    h_k), log_v (B, H, T, h_v); returns o (B, H, T, h_v) in log_v's dtype and the state.

    Stabilisers (all detached; each cancels exactly, so gradients are unchanged):
    * m_t = running max of k per channel (causal); each chunk factors
      exp(q_id + k_jd) = exp(q_id + r_d - L_i) exp(k_jd - r_d) exp(L_i), with the per-row
      shift L_i = max_d(q_id + m_id) (cancels in the ratio) and a reference r_d: the max at
      the chunk start, raised in steps of LEVEL for channels whose max grew inside the chunk,
      so the query factor is <= 1 and the key factor <= exp(LEVEL) for every pair j <= i.
    * log V is shifted by its running max per channel at the chunk end, added back to o.
    * across chunks the state is summed in log space (logcumsumexp over T / c chunk
      summaries), then re-read relative to each chunk's references: every entry <= T.
    """
    out_dtype, (B, H, T, hk), hv = log_v.dtype, q.shape, log_v.shape[-1]
    ninf, tiny = float("-inf"), torch.finfo(torch.float32).tiny
    with torch.autocast(q.device.type, enabled=False):  # fp32: exponentials and log-sums
        c = min(chunk, T)
        qc = _chunks(q.float(), c, 0.0)  # (B, H, N, c, h_k)
        kc = _chunks(k.float(), c, ninf)  # (B, H, N, c, h_k) padded keys weigh exp(-inf) = 0
        lvc = _chunks(log_v.float(), c, ninf)  # (B, H, N, c, h_v)
        N = qc.shape[2]
        m0_k, m0_v = state.m_k.float(), state.m_v.float()  # (B, H, h_k), (B, H, h_v)
        with torch.no_grad():  # stabilisers: constants that cancel, no gradient through them
            run = torch.cummax(kc.reshape(B, H, N * c, hk), dim=2).values  # (B, H, N*c, h_k)
            mk = torch.maximum(run, m0_k[:, :, None]).view(B, H, N, c, hk)  # (B, H, N, c, h_k) running max of k
            base = mk[:, :, :, :1]  # (B, H, N, 1, h_k) at each chunk's first position
            end = mk[:, :, :, -1]  # (B, H, N, h_k) at each chunk's last position
            row = (qc + mk).amax(dim=-1, keepdim=True)  # (B, H, N, c, 1) L_i: the largest q_id + k_jd, j <= i
            mv = torch.maximum(torch.cummax(lvc.amax(dim=3), dim=2).values, m0_v[:, :, None])  # (B, H, N, h_v)
            # The max only grows inside a chunk, so its largest growth is end - base.
            n_levels = int(torch.div(end - base.squeeze(3), LEVEL, rounding_mode="floor").max()) + 1
        q_base = torch.exp(qc + base - row)  # (B, H, N, c, h_k) <= 1 since base <= m_i
        mvx = F.pad(mv, (0, 1))  # (B, H, N, h_v+1) value references; 0 for the ones column
        vx = _with_ones(torch.exp(lvc - mv[:, :, :, None]))  # (B, H, N, c, h_v+1) <= 1
        if n_levels == 1:  # usual case: every key < base + LEVEL, one reference per chunk
            k_base = torch.exp(kc - base)  # (B, H, N, c, h_k) <= exp(LEVEL)
            scores = q_base @ k_base.transpose(-1, -2)  # (B, H, N, c, c)
            sums = k_base.transpose(-1, -2) @ vx  # (B, H, N, h_k, h_v+1) chunk summary, x exp(-base)
            ref_sums = base.squeeze(3)  # (B, H, N, h_k)
        else:  # a key channel jumped by > LEVEL inside a chunk (e.g. logits x100)
            level = torch.div(mk - base, LEVEL, rounding_mode="floor")  # (B, H, N, c, h_k)
            scores = torch.zeros(B, H, N, c, c, device=q.device)  # (B, H, N, c, c)
            for lvl in range(n_levels):
                ref = base + lvl * LEVEL  # (B, H, N, 1, h_k) reference of channels at this level
                q_f = torch.exp(torch.where(level == lvl, qc + ref - row, ninf))  # (B, H, N, c, h_k) <= 1
                k_f = torch.exp((kc - ref).clamp_max(LEVEL))  # (B, H, N, c, h_k) cap hits only pairs j > i
                scores = scores + q_f @ k_f.transpose(-1, -2)  # (B, H, N, c, c)
            sums = torch.exp(kc - end[:, :, :, None]).transpose(-1, -2) @ vx  # (B, H, N, h_k, h_v+1) <= c
            ref_sums = end  # (B, H, N, h_k)
        scores = scores.masked_fill_(_future(c, q.device), 0.0)  # (B, H, N, c, c) causal
        # Chunk summaries as absolute logs (their references added back) for the scan.
        log_sums = sums.clamp_min(tiny).log() + ref_sums[..., None] + mvx[:, :, :, None]  # (B, H, N, h_k, h_v+1)
        log_incl = torch.logcumsumexp(log_sums, dim=2)  # (B, H, N, h_k, h_v+1) log-space scan over chunks
        log_before = _exclusive(log_incl, torch.full_like(log_incl[:, :, :1], ninf))  # (B, H, N, h_k, h_v+1)
        s0 = torch.cat([state.s, state.z[..., None]], dim=-1).float()  # (B, H, h_k, h_v+1)
        mvx0 = F.pad(m0_v, (0, 1))  # (B, H, h_v+1)
        ref_k = base.squeeze(3)  # (B, H, N, h_k)
        carried = (
            torch.exp(log_before - ref_k[..., None] - mvx[:, :, :, None])  # (B, H, N, h_k, h_v+1)
            + s0[:, :, None]
            * torch.exp(m0_k[:, :, None] - ref_k)[..., None]
            * torch.exp(mvx0[:, :, None] - mvx)[:, :, :, None]
        )  # initial state, re-referenced
        num = scores @ vx + q_base @ carried  # (B, H, N, c, h_v+1) both scaled by exp(-L_i)
        # log V shift added back; the normaliser holds the e^0 term of the row max, so >= ~1.
        o = num[..., :hv].clamp_min(tiny).log() + mv[:, :, :, None] - num[..., hv:].log()  # (B, H, N, c, h_v)
        m_k, mvx_T = end[:, :, -1], mvx[:, :, -1]  # (B, H, h_k), (B, H, h_v+1)
        final = (
            torch.exp(log_incl[:, :, -1] - m_k[..., None] - mvx_T[:, :, None])  # (B, H, h_k, h_v+1)
            + s0 * torch.exp(m0_k - m_k)[..., None] * torch.exp(mvx0 - mvx_T)[:, :, None]
        )
        new = OldLogState(
            final[..., :hv].contiguous(), final[..., hv].contiguous(), m_k.contiguous(), mv[:, :, -1].contiguous()
        )
    return _unchunk(o, T).to(out_dtype), new


KERNELS = {
    "after": (log_attention, log_init_state),
    "before": (old_log_attention, old_log_init_state),
}


def run_kernel(impl: str, q: torch.Tensor, k: torch.Tensor, lv: torch.Tensor) -> torch.Tensor:
    attend, init = KERNELS[impl]
    B, H, _, h = q.shape
    return attend(q, k, lv, init(B, H, h, h), 64)[0]  # (B, H, T, h)


def memory_setup(impl: str, T: int):
    """For measure_peak: one forward + backward of a kernel (after a T=64 warm-up)."""
    f = naive_log if impl == "naive" else (lambda q, k, v: run_kernel(impl, q, k, v))
    fwd_bwd(f, *qkv(64))()
    return fwd_bwd(f, *qkv(T))


def use_kernel(impl: str) -> None:
    """Point the heinsen mixer at one kernel (it looks both names up at call time)."""
    heinsen_model.log_attention, heinsen_model.log_init_state = KERNELS[impl]


def fig_memory(T: int) -> None:
    print(f"\n1. kernel forward+backward peak memory at T={T} (MiB; measure_peak, fresh process)")
    mib = {}
    for impl in ("after", "before", "naive"):
        p = measure_peak("bench_heinsen_fix:memory_setup", impl=impl, T=T)
        mib[impl] = p.bytes / 2**20 if p.bytes is not None else float("nan")
        print(f"   {impl:7} {mib[impl]:9.1f}  ({p.method or p.status})")
    print(
        f"   after/naive {mib['after'] / mib['naive']:.3f}, before/naive {mib['before'] / mib['naive']:.3f}"
        "  (target after/naive <= 0.125)"
    )


def fig_step(T: int, repeats: int) -> None:
    print(f"\n2. training-step time at T={T} (backbone L=1, fwd + bwd + AdamW; s, median of {repeats}, interleaved)")
    model = backbone("heinsen", 1, T)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {"before": [], "after": []}
    for rep in range(repeats + 1):  # the first round is a warm-up
        for impl in ("before", "after") if rep % 2 else ("after", "before"):
            use_kernel(impl)
            t0 = time.perf_counter()
            model(idx, targets=idx).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if rep:
                times[impl].append(time.perf_counter() - t0)
    use_kernel("after")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"   before {med['before']:.3f}  after {med['after']:.3f}  after/before {med['after'] / med['before']:.3f}"
        "  (target <= 1.2)"
    )
    print("   all: " + "; ".join(f"{k} " + " ".join(f"{t:.3f}" for t in v) for k, v in times.items()))


@torch.no_grad()
def fig_accuracy(T: int = 1024) -> None:
    print(f"\n3. accuracy at T={T}: max |o - o64| / max(|o64|, 1) (float64 log-space quadratic), and causality")
    for std in (1.0, 20.0, 50.0):
        q, k, lv = qkv(T, grad=False, seed=1)
        lv = lv * std
        k[:, :, 3], lv[:, :, 3] = -150.0, 200.0  # the early extreme token
        ref = log_quadratic64(q, k, lv)  # (1, H, T, h)
        lv2 = lv.clone()
        lv2[:, :, 600] += 200.0
        row = []
        for impl in ("before", "after"):
            o = run_kernel(impl, q, k, lv)
            err = float(((o.double() - ref).abs() / ref.abs().clamp_min(1.0)).max())
            moved = float((run_kernel(impl, q, k, lv2)[:, :, :600] - o[:, :, :600]).abs().max())
            row.append(f"{impl}: error {err:.2e}, earlier outputs moved by {moved:.2e}")
        print(f"   log V std {std:g}: " + "; ".join(row))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="1,2,3")
    args = ap.parse_args()
    print(
        f"torch {torch.__version__}, CPU fp32, {torch.get_num_threads()} threads, batch 1, d_model {D_MODEL}, "
        f"{N_HEAD} heads (h={H_DIM}), chunk 64"
    )
    only = set(args.only.split(","))
    if "1" in only:
        fig_memory(args.T)
    if "2" in only:
        fig_step(args.T, args.repeats)
    if "3" in only:
        fig_accuracy()


if __name__ == "__main__":
    main()
