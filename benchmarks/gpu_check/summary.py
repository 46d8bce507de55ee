"""summary.json and summary.md: every step's status and figures, and the issue's three
targets, from the steps' records in steps/<step>.json (a rerun of some steps keeps the others')."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from benchmarks.gpu_check.layout import Layout
from benchmarks.gpu_check.markdown import render
from benchmarks.gpu_check.plan import LONG_T, Sizes

SCHEMA = 1
MFU_TARGET = 0.40


def _clean(obj: Any) -> Any:
    """JSON without NaN or infinity (null instead), so any reader takes it."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _step_records(lay: Layout, s: Sizes) -> list[dict[str, Any]]:
    out = []
    for st in s.steps:
        path = lay.step_json(st.name)
        record = json.loads(path.read_text()) if path.exists() else {"status": "not run", "reason": None}
        record.setdefault("name", st.name)
        record.setdefault("title", st.title)
        record["cuda_parts"] = st.cuda
        record["left_out"] = s.skipped_parts.get(st.name)
        out.append(record)
    return out


def _figs(steps: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next((st.get("figures") or {} for st in steps if st["name"] == name), {})


def speed_curves(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The speed and fla steps' figures as one: each reads every speed curve in the store, so the
    union holds the latest of each whether one step ran or both."""
    speed, fla = _figs(steps, "speed"), _figs(steps, "fla")
    return {**speed, **fla, "curves": {**speed.get("curves", {}), **fla.get("curves", {})}}


def targets(steps: list[dict[str, Any]], dry_run: bool) -> list[dict[str, Any]]:
    """The issue's targets, each with its value and whether it is met (None: not measured)."""
    gpt2, speed, check = _figs(steps, "gpt2"), speed_curves(steps), _figs(steps, "check")
    mfu = gpt2.get("mfu")
    curves = speed.get("curves", {})
    key = f"faster_than_softmax_at_{LONG_T}"
    fla = {c: v.get(key) for c, v in curves.items() if c.endswith("(fla)")}
    gate = check.get("variants", {})
    green = [v for v, f in gate.items() if _green(f)]
    out = [
        {
            "target": f"softmax MFU >= {MFU_TARGET:.0%} (GPT-2 small, bf16, compiled)",
            "value": mfu,
            "met": None if mfu is None else mfu >= MFU_TARGET,
        },
        {
            "target": f"linear-time variants (kernel: fla) faster than SDPA at T = {LONG_T}",
            "value": {c: v.get(key) for c, v in curves.items() if c != "softmax"},
            "met": None if not fla or None in fla.values() else all(fla.values()),
        },
        {
            "target": "every variant green in the CUDA gate (fp32, bf16 and fp16 autocast)",
            "value": f"{len(green)}/{len(gate)} green",
            "met": None if not gate else len(green) == len(gate),
        },
    ]
    if dry_run:  # tiny CPU sizes: the figures check the logic, they measure nothing the targets mean
        for t in out:
            t.update(met=None, note="dry run: not a measurement")
    return out


def _green(f: dict[str, Any]) -> bool:
    return all(f.get(k, {}).get("status") == "pass" for k in ("fp32", "bf16-autocast", "fp16-autocast"))


def write_summary(lay: Layout, s: Sizes, started: float, finished: float, budget_s: float) -> dict[str, Any]:
    steps = _step_records(lay, s)
    env = _figs(steps, "env")
    cuda = env.get("cuda", {})
    summary = {
        "schema": SCHEMA,
        "mode": s.mode,
        "device": cuda.get("name") if cuda.get("available") else "cpu",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": finished - started,
        "budget_s": budget_s,
        "variants": env.get("run_variants"),
        "variants_note": s.variants_note,
        "steps": [{k: v for k, v in st.items() if k != "figures"} for st in steps],
        "targets": targets(steps, s.mode == "dry-run"),
        "figures": {st["name"]: st.get("figures") or {} for st in steps} | {"speed": speed_curves(steps)},
        "layout": {
            "store": lay.store.name,
            "suite": lay.suite.name,
            "logs": f"{lay.logs.name}/<step>.log",
            "steps": f"{lay.steps.name}/<step>.json",
            "report": lay.report.name + "/",
            "summary": [lay.summary_json.name, lay.summary_md.name],
        },
    }
    summary = _clean(summary)
    lay.summary_json.write_text(json.dumps(summary, indent=1))
    lay.summary_md.write_text(render(summary))
    return summary
