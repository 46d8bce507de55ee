"""Speed ratios from the stored timing rounds, and as a reader says them: the ratio of mean times
with its interval (one estimator for the first screen, the summary and the pivot), "2.4x slower
[2.0, 2.9]" or "1.9x faster [1.5, 2.3]" (the tables keep the raw ratio, the baseline's time /
the variant's), which points were noisy, and what code path a timed point ran where that was a
fallback or an unfused path."""

from __future__ import annotations

import math
from typing import Any

from attnbench.decision_words import NO_SPEED_DIFFERENCE, RATIO_FASTER, RATIO_SLOWER
from attnbench.report.load import StoreData
from attnbench.report.values import is_number

Rounds = tuple[float, float, int]  # (mean, standard deviation, rounds) of one point's timing rounds


def _x(v: float) -> str:
    return f"{v:.3g}"


def ratio_text(ratio: float, lo: float, hi: float) -> str:
    """The baseline's time / the variant's (``ratio``, 95% interval ``lo``..``hi``) read forward."""
    if lo <= 1.0 <= hi:
        return f"{NO_SPEED_DIFFERENCE} ({_x(ratio)}x [{_x(lo)}, {_x(hi)}])"
    if ratio >= 1.0:
        return f"{RATIO_FASTER.format(ratio=_x(ratio))} [{_x(lo)}, {_x(hi)}]"
    return f"{RATIO_SLOWER.format(ratio=_x(1 / ratio))} [{_x(1 / hi)}, {_x(1 / lo)}]"


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
    res = data.results_of(speed.index, "time_s")
    variant_of = dict(zip(speed.index, speed["variant"], strict=True))
    out: dict[str, dict[int, str]] = {}
    for run_id, tags in zip(res["run_id"], res["tags"], strict=True):
        flag = path_flag(tags) if tags.get("mode") == mode and tags.get("status") == "ok" else ""
        if flag:
            out.setdefault(str(variant_of[run_id]), {})[int(tags["T"])] = flag
    return out


def _timed_points(data: StoreData, mode: str) -> dict[str, dict[int, tuple[Rounds, str | None]]]:
    """Per (variant, T) of one mode, the ok point with the most timing rounds (at least 2): its
    rounds and, where its stored result is flagged noisy, why ('noisy timing: ...'), else None."""
    speed = data.runs_of("speed").set_index("id")
    res = data.results_of(speed.index, "time_s")
    variant_of = dict(zip(speed.index, speed["variant"], strict=True))
    out: dict[str, dict[int, tuple[Rounds, str | None]]] = {}
    for run_id, tags in zip(res["run_id"], res["tags"], strict=True):
        if (
            tags.get("mode") == mode
            and tags.get("status") == "ok"
            and is_number(tags.get("mean_s"))
            and is_number(tags.get("stddev_s"))
            and int(tags.get("rounds") or 0) >= 2
        ):
            point = (float(tags["mean_s"]), float(tags["stddev_s"]), int(tags["rounds"]))
            reason = tags.get("noisy_reason")
            noisy = (f"noisy timing: {reason}" if reason else "noisy timing") if tags.get("noisy") else None
            have = out.setdefault(variant_of[run_id], {})
            if int(tags["T"]) not in have or have[int(tags["T"])][0][2] < point[2]:
                have[int(tags["T"])] = (point, noisy)
    return out


def speed_rounds(data: StoreData, mode: str) -> dict[str, dict[int, Rounds]]:
    """(mean, standard deviation, rounds) of the repeated timing rounds per (variant, T) of
    one mode: the ok point with the most rounds. The one speed estimator of the report: the
    ratio of these means (``ratio_interval``) in the summary, the pivot and the first screen."""
    return {v: {T: p for T, (p, _) in Ts.items()} for v, Ts in _timed_points(data, mode).items()}


def speed_noisy(data: StoreData, mode: str) -> dict[str, dict[int, str]]:
    """Per (variant, T) of one mode, why the point ``speed_rounds`` reads is flagged noisy
    ('noisy timing: coefficient of variation 73% > 20%'); points not flagged are absent."""
    return {
        v: {T: why for T, (_, why) in Ts.items() if why}
        for v, Ts in _timed_points(data, mode).items()
        if any(why for _, why in Ts.values())
    }


def ratio_interval(base: tuple[float, float, int], variant: tuple[float, float, int]) -> tuple[float, float, float]:
    """Baseline mean time / variant mean time with a 95% interval from the timing rounds
    (delta method on the log ratio: se^2 = cv_b^2 / n_b + cv_v^2 / n_v)."""
    (mb, sb, nb), (mv, sv, nv) = base, variant
    ratio = mb / mv
    se = math.sqrt((sb / mb) ** 2 / nb + (sv / mv) ** 2 / nv)
    return ratio, ratio * math.exp(-1.96 * se), ratio * math.exp(1.96 * se)


def speedup_at_longest(
    rounds: dict[str, dict[int, Rounds]], variant: str, baseline: str
) -> tuple[tuple[float, float, float] | None, int | None]:
    """((baseline mean time / variant mean time, its 95% interval), T) at the longest T both
    timed: ``ratio_interval``, the estimator of the pivot and the first screen."""
    common = sorted(set(rounds.get(variant, {})) & set(rounds.get(baseline, {})))
    if not common:
        return None, None
    T = common[-1]
    if variant == baseline:
        return (1.0, 1.0, 1.0), T  # one point against itself
    return ratio_interval(rounds[baseline][T], rounds[variant][T]), T


def noisy_counts(data: StoreData) -> dict[str, int]:
    """Speed points stored as noisy, per variant."""
    speed = data.runs_of("speed").set_index("id")
    res = data.results_of(speed.index, "time_s")
    variant_of = dict(zip(speed.index, speed["variant"], strict=True))
    out: dict[str, int] = {}
    for _, r in res.iterrows():
        if r["tags"].get("noisy"):
            v = variant_of[r["run_id"]]
            out[v] = out.get(v, 0) + 1
    return out
