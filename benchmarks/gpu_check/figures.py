"""The figures of each step, read back from the store the step wrote: gate verdicts per
dtype, smoke losses, GPT-2 throughput and MFU, speed and memory curves with crossovers."""

from __future__ import annotations

import math
import re
from typing import Any

from attnbench.gate.checks import CHECKS
from attnbench.gate.scale import AUTOCAST_F64_UP_TO, AUTOCAST_TOL
from attnbench.stats.slopes import crossover
from attnbench.store.database import Store
from benchmarks.gpu_check.plan import LONG_T, SUITE_NAME

AMP_CHECK = "autocast_at_scale"
_AMP_PART = re.compile(
    r"(?P<dtype>bf16|fp16) x(?P<factor>[\d.]+): leak (?P<leak>\S+) \(tol [^)]*\), vs float64 (?P<f64>\S+) \(tol [^)]*\)"
)


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _worse(a: float | None, b: float) -> float:
    """The larger of two figures, NaN counting as the worst."""
    if a is None:
        return b
    return b if math.isnan(b) or (not math.isnan(a) and b > a) else a


def amp_by_dtype(row: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per autocast dtype: status, worst leak over the magnitudes, worst float64 deviation over
    those the gate judges (up to AUTOCAST_F64_UP_TO) and, apart, over those it only reports."""
    out: dict[str, dict[str, Any]] = {}
    for dtype, (leak_tol, f64_tol, factors) in AUTOCAST_TOL.items():
        entry: dict[str, Any] = {
            "tolerance": {
                "leak": leak_tol,
                "vs_float64": f64_tol,
                "vs_float64_judged_up_to": AUTOCAST_F64_UP_TO[dtype],
                "weight_scales": list(factors),
            },
        }
        if row is None or row["status"] in ("skip", "error"):
            entry["status"] = "skip" if row is None else row["status"]
            entry["reason"] = "not run" if row is None else row["detail"]
        else:
            leak: float | None = None
            f64: float | None = None
            above: float | None = None  # beyond the judged magnitudes: half precision's rounding, reported
            for m in _AMP_PART.finditer(row["detail"]):
                if m["dtype"] == dtype:
                    leak = _worse(leak, _num(m["leak"]))
                    if float(m["factor"]) <= AUTOCAST_F64_UP_TO[dtype]:
                        f64 = _worse(f64, _num(m["f64"]))
                    else:
                        above = _worse(above, _num(m["f64"]))
            failed = any(p.startswith(f"{dtype} x") and "FAIL" in p for p in row["detail"].split("; "))
            entry.update(
                status="fail" if failed else "pass",
                worst_leak=leak,
                worst_vs_float64=f64,
                vs_float64_above_judged=above,
            )
        out[f"{dtype}-autocast"] = entry
    return out


def check_figures(store: Store, variants: list[str]) -> dict[str, Any]:
    """Per variant: each check's status, figure and tolerance; fp32 and each autocast dtype in short."""
    per_variant: dict[str, Any] = {}
    for name in variants:
        rows = {r["check_name"]: r for r in store.checks(variant=name)}
        if not rows:
            per_variant[name] = {"status": "missing", "checks": {}}
            continue
        checks = {c: {k: rows[c][k] for k in ("status", "figure", "tolerance", "detail")} for c in CHECKS if c in rows}
        fp32 = [c for c in checks if c != AMP_CHECK]
        bad = [c for c in fp32 if checks[c]["status"] in ("fail", "error")]
        per_variant[name] = {
            "fp32": {"status": "fail" if bad else "pass", "failed": bad},
            **amp_by_dtype(rows.get(AMP_CHECK)),
            "checks": checks,
        }
    return {"variants": per_variant, "fp32_tolerances": _fp32_tolerances(per_variant)}


def _fp32_tolerances(per_variant: dict[str, Any]) -> dict[str, float | None]:
    for v in per_variant.values():
        if v["checks"]:
            return {c: r["tolerance"] for c, r in v["checks"].items() if c != AMP_CHECK}
    return {}


def _runs(store: Store, experiment: str, kind: str) -> list[dict[str, Any]]:
    """The experiment's cells (its derived rows, such as speed fits, are runs of another kind)."""
    return [r for r in store.runs(suite=SUITE_NAME, kind=kind) if r["experiment"] == experiment]


def _losses(store: Store, run_id: int) -> list[tuple[int, float]]:
    return [(int(m["step"]), m["value"]) for m in store.metrics(run_id, "train/loss")]


def smoke_figures(store: Store) -> dict[str, Any]:
    """Per trained model (the hybrid by its pattern name): finite and decreasing loss."""
    out: dict[str, Any] = {}
    for run in _runs(store, "smoke", "train"):
        losses = _losses(store, run["id"])
        values = [v for _, v in losses]
        finite = bool(values) and all(v is not None and math.isfinite(v) for v in values)
        s = run["summary"]
        out[run["variant"]] = {
            "status": run["status"],
            "error": run["error"],
            "steps": s.get("steps"),
            "dtype": s.get("dtype"),
            "first_loss": values[0] if values else None,
            "last_loss": values[-1] if values else None,
            "val_loss": s.get("val_loss"),
            "finite": finite,
            "decreasing": finite and len(values) >= 2 and values[-1] < values[0],
            "tokens_per_s": s.get("tokens_per_s"),
            "gate_failed": (run["provenance"].get("gate") or {}).get("failed"),
            "curve": losses,
        }
    return {"models": out}


def steady_throughput(store: Store, run_id: int, warm_steps: int) -> dict[str, Any]:
    """Tokens/s between the first logged step past ``warm_steps`` and the last one: the
    harness's own figure counts compilation (the first steps) into its training time."""
    points = [m for m in store.metrics(run_id, "train/loss") if m["step"] > warm_steps]
    if len(points) < 2 or points[-1]["elapsed_s"] <= points[0]["elapsed_s"]:
        return {"tokens_per_s": None, "window": None}
    first, last = points[0], points[-1]
    tps = (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"])
    return {"tokens_per_s": tps, "window": [int(first["step"]), int(last["step"])]}


def gpt2_figures(store: Store, warm_steps: int) -> dict[str, Any]:
    runs = _runs(store, "gpt2", "train")
    if not runs:
        return {"status": "missing"}
    run = runs[-1]
    s = run["summary"]
    steady = steady_throughput(store, run["id"], warm_steps)
    peak, tfpt = s.get("peak_flops_per_s"), s.get("train_flops_per_token")
    mfu = tfpt * steady["tokens_per_s"] / peak if peak and tfpt and steady["tokens_per_s"] else None
    return {
        "status": run["status"],
        "error": run["error"],
        "model": {k: run["coords"].get(k) for k in ("d_model", "n_layer")} | {"n_params": s.get("n_params")},
        "seq_len": (run["config"].get("train") or {}).get("seq_len"),
        "batch_size": (run["config"].get("train") or {}).get("batch_size"),
        "dtype": s.get("dtype"),
        "compile": s.get("compile"),
        "steps": s.get("steps"),
        "train_flops_per_token": tfpt,
        "tokens_per_s": steady["tokens_per_s"],
        "steady_window_steps": steady["window"],
        "mfu": mfu,
        "peak_flops_per_s": peak,
        "peak_method": s.get("peak_method"),
        "whole_run_tokens_per_s": s.get("tokens_per_s"),
        "whole_run_mfu": s.get("mfu"),
        "peak_memory_bytes": s.get("peak_memory_bytes"),
        "val_loss": s.get("val_loss"),
    }


def _curve_label(run: dict[str, Any]) -> str:
    options = (run["config"].get("model") or {}).get("options") or {}
    kernel = options.get("kernel") if isinstance(options, dict) else None
    return f"{run['variant']} (fla)" if kernel == "fla" else run["variant"]


def _points(store: Store, run_id: int) -> dict[int, dict[str, Any]]:
    points: dict[int, dict[str, Any]] = {}
    for r in store.results(run_id):
        if r["name"] not in ("time_s", "peak_memory_bytes"):
            continue
        tags = r["tags"]
        p = points.setdefault(int(tags["T"]), {})
        key = "time" if r["name"] == "time_s" else "memory"
        p[f"{key}_status"] = tags.get("status")
        p[f"{key}_{'s' if key == 'time' else 'bytes'}"] = r["value"]
        if key == "time":
            p.update(
                backend=tags.get("backend"),
                fallback=tags.get("fallback"),
                dtype=tags.get("dtype"),
                noisy=tags.get("noisy"),
            )
            if tags.get("error"):
                p["error"] = str(tags["error"])[:300]
    return dict(sorted(points.items()))


def speed_figures(store: Store) -> dict[str, Any]:
    """Per curve (variant, and `(fla)` for kernel: fla): points, crossover against softmax's
    train-step time (attnbench.stats.slopes.crossover, the harness's own rule), and the T = 16K verdict."""
    curves: dict[str, Any] = {}
    for experiment in ("speed", "speed-fla"):
        for run in _runs(store, experiment, "speed"):
            curves[_curve_label(run)] = {
                "experiment": experiment,
                "status": run["status"],
                "error": run["error"],
                "gate_failed": (run["provenance"].get("gate") or {}).get("failed"),
                "points": _points(store, run["id"]),
            }
    base = curves.get("softmax")
    base_times = {T: p.get("time_s") for T, p in base["points"].items()} if base else {}
    for label, curve in curves.items():
        if label == "softmax":
            continue
        times = {T: p.get("time_s") for T, p in curve["points"].items()}
        cx = crossover(times, base_times)
        curve["crossover"] = {"status": cx.status, "T": cx.T, "T_interp": cx.T_interp}
        v, b = times.get(LONG_T), base_times.get(LONG_T)
        curve[f"faster_than_softmax_at_{LONG_T}"] = (
            None if LONG_T not in times or LONG_T not in base_times else v is not None and (b is None or v < b)
        )
    return {"mode": "train_step", "baseline": "softmax", "long_T": LONG_T, "curves": curves}
