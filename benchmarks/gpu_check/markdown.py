"""summary.md: the summary as one page of Markdown tables (the README's "On a GPU" figures)."""

from __future__ import annotations

from typing import Any


def _n(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _ms(s: Any) -> str:
    return "-" if s is None else f"{s * 1e3:.3g}"


def _gib(b: Any) -> str:
    return "-" if b is None else f"{b / 2**30:.3g}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["(none)", ""]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows] + [""]


def _met(m: Any) -> str:
    return "not measured" if m is None else ("met" if m else "NOT met")


def _env(f: dict[str, Any]) -> list[str]:
    if "torch" not in f:  # the step failed before it read the versions
        return []
    cuda, smi = f.get("cuda", {}), f.get("nvidia_smi", {})
    fla, triton = f.get("fla", {}), f.get("triton", {})
    return [
        f"torch {f['torch']['version']} (CUDA {f['torch']['cuda']}; floor {f.get('torch_floor')}), "
        f"driver {smi.get('driver_version', '-')}, GPU {cuda.get('name', 'none')}, "
        f"triton {triton.get('version') if triton.get('imports') else 'does not import'}, "
        f"fla {fla.get('version') if fla.get('imports') else 'does not import: ' + str(fla.get('error'))}",
        "",
    ]


def _gate(f: dict[str, Any]) -> list[str]:
    rows = []
    for v, per in f.get("variants", {}).items():
        cells = [v, per.get("fp32", {}).get("status", "missing")]
        for dtype in ("bf16-autocast", "fp16-autocast"):
            d = per.get(dtype, {})
            if d.get("status") == "skip":
                cells.append("skip")
            else:
                tol = d.get("tolerance", {})
                above = d.get("vs_float64_above_judged")
                cells.append(
                    f"{d.get('status', '-')} leak {_n(d.get('worst_leak'))} (tol {_n(tol.get('leak'))}), "
                    f"vs f64 {_n(d.get('worst_vs_float64'))} (tol {_n(tol.get('vs_float64'))})"
                    + ("" if above is None else f"; above x{_n(tol.get('vs_float64_judged_up_to'))}: {_n(above)}")
                )
        rows.append(cells)
    return _table(["variant", "fp32", "bf16 autocast", "fp16 autocast"], rows) + [
        "",
        "vs f64: judged up to the weight scale named; above it reported only (half precision's rounding).",
        "",
    ]


def _smoke(f: dict[str, Any]) -> list[str]:
    rows = [
        [m, r["status"], _n(r["steps"]), f"{_n(r['first_loss'])} -> {_n(r['last_loss'])}", _n(r["val_loss"])]
        + [_n(r["finite"]), _n(r["decreasing"])]
        for m, r in f.get("models", {}).items()
    ]
    return _table(["model", "status", "steps", "train loss", "val loss", "finite", "decreasing"], rows)


def _gpt2(f: dict[str, Any]) -> list[str]:
    if not f or f.get("status") == "missing":
        return ["(no run stored)", ""]
    return [
        f"- {_n(f.get('tokens_per_s'))} tokens/s (steps {f.get('steady_window_steps')}), "
        f"MFU {_n(f.get('mfu'))} of a measured peak of {_n(f.get('peak_flops_per_s'))} FLOP/s "
        f"({f.get('peak_method')})",
        f"- d_model {f.get('model', {}).get('d_model')} x {f.get('model', {}).get('n_layer')} layers, "
        f"{f.get('dtype')}, compile {f.get('compile')}, batch {f.get('batch_size')} x T {f.get('seq_len')}, "
        f"{_n(f.get('model', {}).get('n_params'))} parameters, peak memory {_gib(f.get('peak_memory_bytes'))} GiB",
        f"- whole run, first steps and any compilation included: {_n(f.get('whole_run_tokens_per_s'))} tokens/s, "
        f"MFU {_n(f.get('whole_run_mfu'))}",
        "",
    ]


def _point(p: dict[str, Any], key: str, fmt: Any) -> str:
    status = p.get(f"{key}_status")
    value = p.get("time_s" if key == "time" else "memory_bytes")
    return fmt(value) if status == "ok" else str(status or "-")


def _speed(f: dict[str, Any]) -> list[str]:
    curves = f.get("curves", {})
    lengths = sorted({int(T) for c in curves.values() for T in c["points"]})
    head = ["curve", *[f"T={T}" for T in lengths]]
    time_rows, mem_rows = [], []
    for label, c in curves.items():
        pts = {int(T): p for T, p in c["points"].items()}
        cx = c.get("crossover")
        cross = "baseline" if cx is None else (f"{cx['status']} T={cx['T']}" if cx.get("T") else cx["status"])
        failed = c.get("gate_failed")
        gate = "-" if failed is None else ("green" if not failed else "FAILED " + ", ".join(failed))
        time_rows.append([label, *[_point(pts.get(T, {}), "time", _ms) for T in lengths], cross, gate])
        mem_rows.append([label, *[_point(pts.get(T, {}), "memory", _gib) for T in lengths]])
    backends = sorted({str(p.get("backend")) for p in curves.get("softmax", {}).get("points", {}).values()})
    return [
        f"Train-step time (ms), {f.get('mode', 'train_step')}; softmax's SDPA backend: {', '.join(backends) or '-'}",
        "",
        *_table([*head, "crossover vs softmax", "gate (these options)"], time_rows),
        "Peak memory (GiB)",
        "",
        *_table(head, mem_rows),
    ]


def render(summary: dict[str, Any]) -> str:
    figs = summary["figures"]
    lines = [
        f"# GPU check ({summary['mode']}) on {summary['device']}",
        "",
        f"{summary['started_at']}, {summary['wall_s']:.0f} s of a {summary['budget_s']:.0f} s budget; "
        f"variants: {summary['variants_note']}.",
        "",
        *_env(figs.get("env", {})),
        "## Steps",
        "",
        *_table(
            ["step", "status", "wall / box (s)", "note"],
            [
                [
                    st["name"],
                    st["status"],
                    f"{st.get('wall_s') or 0:.0f} / {st.get('box_s') or 0:.0f}",
                    "; ".join(x for x in (st.get("reason"), st.get("left_out")) if x),
                ]
                for st in summary["steps"]
            ],
        ),
        "## Targets",
        "",
        *_table(
            ["target", "value", "verdict"],
            [
                [t["target"], _n(t["value"]), _met(t["met"]) + (f" ({t['note']})" if t.get("note") else "")]
                for t in summary["targets"]
            ],
        ),
        "## Trust gate (attnbench check)",
        "",
        *_gate(figs.get("check", {})),
        "## Training smoke",
        "",
        *_smoke(figs.get("smoke", {})),
        "## GPT-2 small",
        "",
        *_gpt2(figs.get("gpt2", {})),
        "## Speed and memory against length",
        "",
        *_speed(figs.get("speed", {})),
    ]
    return "\n".join(lines).rstrip() + "\n"
