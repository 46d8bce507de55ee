"""Speed ratios as a reader says them: "2.4x slower [2.0, 2.9]" or "1.9x faster [1.5, 2.3]"
(the tables keep the raw ratio, the baseline's time / the variant's), and what code path a
timed point ran where that was a fallback or an unfused path."""

from __future__ import annotations

from typing import Any

from attnbench.report.load import StoreData


def _x(v: float) -> str:
    return f"{v:.3g}"


def ratio_text(ratio: float, lo: float, hi: float) -> str:
    """The baseline's time / the variant's (``ratio``, 95% interval ``lo``..``hi``) read forward."""
    if lo <= 1.0 <= hi:
        return f"no speed difference detected ({_x(ratio)}x [{_x(lo)}, {_x(hi)}])"
    if ratio >= 1.0:
        return f"{_x(ratio)}x faster [{_x(lo)}, {_x(hi)}]"
    return f"{_x(1 / ratio)}x slower [{_x(1 / hi)}, {_x(1 / lo)}]"


def path_flag(tags: dict[str, Any]) -> str:
    """ "fallback path" or "unfused path" where a timed point's describe_path() (any layer) or the
    harness said so ('' otherwise)."""
    raw = tags.get("path")
    path: dict[str, Any] = raw if isinstance(raw, dict) else {}
    layers = [p for p in (path.get("layers") or [path]) if isinstance(p, dict)]
    if tags.get("fallback") or any(p.get("fallback") for p in layers):
        return "fallback path"
    if any(p.get("fused") is False for p in layers):
        return "unfused path"
    return ""


def path_flags(data: StoreData, mode: str) -> dict[str, dict[int, str]]:
    """Per (variant, T) of one mode's ok points, the flag of what ran, where there is one."""
    speed = data.runs_of("speed").set_index("id")
    res = data.results[data.results["run_id"].isin(speed.index) & (data.results["name"] == "time_s")]
    variant_of = dict(zip(speed.index, speed["variant"], strict=True))
    out: dict[str, dict[int, str]] = {}
    for run_id, tags in zip(res["run_id"], res["tags"], strict=True):
        flag = path_flag(tags) if tags.get("mode") == mode and tags.get("status") == "ok" else ""
        if flag:
            out.setdefault(str(variant_of[run_id]), {})[int(tags["T"])] = flag
    return out
