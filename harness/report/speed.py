"""Sections for `speed` experiments: every measured point (failed points with their status
and T), the fitted log-log slopes with their 95% intervals, the crossover lengths against
softmax (from the finalizer's "speed_fit" runs), and one figure per mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from attnbench.decision_words import FASTER_AT_EVERY_T, FASTER_FROM, NEVER_FASTER, NO_SPEED_BASELINE
from attnbench.report import figures
from attnbench.report.document import Figure, Section, Table
from attnbench.report.load import StoreData
from attnbench.report.selection import model_label
from attnbench.report.values import MISSING, bytes_text, is_number, num, seconds_text
from attnbench.stats.slopes import MIN_SLOPE_POINTS, too_few_text

QUANTITY = {"time_s": "time", "peak_memory_bytes": "memory"}
MODES = ("forward", "train_step", "decode")


def speed_points(data: StoreData, run_ids: list[int]) -> pd.DataFrame:
    """One row per (run, mode, T, quantity): variant, seed, model, mode, T, quantity, value (a time:
    the median round), mean_s (a time: the mean over the rounds, what every speed ratio reads),
    status, error, stddev_s, backend, fallback, dtype."""
    res = data.results_of(run_ids, QUANTITY)
    runs = {int(r["id"]): r for _, r in data.runs.iterrows() if int(r["id"]) in set(run_ids)}
    rows = []
    for _, r in res.iterrows():
        t, run = r["tags"], runs[int(r["run_id"])]
        rows.append(
            {
                "variant": run["variant"],
                "seed": None if pd.isna(run["seed"]) else int(run["seed"]),
                "model": int(run["coords"].get("model", 0)),
                "model_label": model_label(run["coords"], run["config"]),
                "rounds": t.get("rounds"),
                "mode": t.get("mode"),
                "T": t.get("T"),
                "quantity": QUANTITY[r["name"]],
                "value": r["value"],
                "mean_s": t.get("mean_s"),
                "status": t.get("status", "ok" if r["value"] is not None else "unknown"),
                "error": t.get("error"),
                "stddev_s": t.get("stddev_s"),
                "backend": t.get("backend"),
                "fallback": t.get("fallback"),
                "dtype": t.get("dtype"),
                "noisy": bool(t.get("noisy")),
                "path": t.get("path") or {},
            }
        )
    return pd.DataFrame(rows)


MEMORY_RESOLUTION = 4096  # bytes: a CPU peak is read from the process's high-water mark, in pages


def memory_text(v: Any) -> str:
    """'5.88 MiB', or '< 4 KiB (below the measurement's resolution)' for a peak under one page,
    never '0 B'."""
    if not is_number(v):
        return MISSING
    if v < MEMORY_RESOLUTION:
        return f"< {bytes_text(MEMORY_RESOLUTION)} (below the measurement's resolution)"
    return bytes_text(v)


def path_text(backend: Any, path: Any, fallback: Any) -> str:
    """What ran at a point: the mixers' own ``describe_path()`` (per layer when they differ),
    then the attention backend the profiler saw, and "(fallback)" when either fell back."""

    def pairs(d: dict[str, Any]) -> str:  # the kernel first, then the rest as stored
        keys = sorted((k for k in d if k != "layers"), key=lambda k: k != "kernel")
        return ", ".join(f"{k}={d[k]}" for k in keys)

    parts: list[str] = []
    if isinstance(path, dict) and path.get("layers"):
        parts.append("; ".join(f"L{i}: {pairs(p)}" for i, p in enumerate(path["layers"])))
    elif isinstance(path, dict) and path:
        parts.append(pairs(path))
    if isinstance(backend, str) and backend:
        parts.append(f"backend={backend}")
    if not parts:
        return MISSING
    return "; ".join(parts) + (" (fallback)" if fallback else "")


def _points_table(exp: str, pts: pd.DataFrame) -> Table:
    keys = ["variant", "model", "seed", "mode", "T"]
    wide: list[dict[str, Any]] = []
    for key, g in pts.groupby(keys, sort=True, dropna=False):
        time = g[g["quantity"] == "time"]
        mem = g[g["quantity"] == "memory"]
        trow = time.iloc[0] if not time.empty else None
        mrow = mem.iloc[0] if not mem.empty else None
        status = trow["status"] if trow is not None else (mrow["status"] if mrow is not None else "unknown")
        if status == "ok" and mrow is not None and mrow["status"] != "ok":
            status = mrow["status"]
        wide.append(
            {
                **dict(zip(keys, key, strict=True)),
                "time_s": trow["value"] if trow is not None else None,
                "time_stddev_s": trow["stddev_s"] if trow is not None else None,
                "rounds": trow["rounds"] if trow is not None else None,
                "model_label": g["model_label"].iloc[0],
                "peak_memory_bytes": mrow["value"] if mrow is not None else None,
                "status": status,
                "error": next((e for e in g["error"] if isinstance(e, str) and e), None),
                "backend": trow["backend"] if trow is not None else None,
                "fallback": trow["fallback"] if trow is not None else None,
                "path": trow["path"] if trow is not None else {},
                "noisy": bool(trow.get("noisy", False)) if trow is not None else False,
            }
        )
    data = pd.DataFrame(wide)

    def time_text(r: pd.Series) -> str:
        if r["status"] != "ok" and not is_number(r["time_s"]):
            return f"{r['status']} at T={r['T']}"
        many = is_number(r["rounds"]) and r["rounds"] > 1 and is_number(r["time_stddev_s"])
        sd = f" ± {seconds_text(r['time_stddev_s'])} ({num(r['rounds'])} rounds)" if many else ""
        return seconds_text(r["time_s"]) + sd + (" NOISY" if r["noisy"] else "")

    view = pd.DataFrame(
        {
            "variant": data["variant"],
            "model": data["model_label"],
            "seed": data["seed"],
            "mode": data["mode"],
            "T": [num(t) for t in data["T"]],
            "time (median ± sd)": data.apply(time_text, axis=1),
            "peak memory": [memory_text(v) for v in data["peak_memory_bytes"]],
            "status": data["status"],
            "path": [
                path_text(b, p, f) for b, p, f in zip(data["backend"], data["path"], data["fallback"], strict=True)
            ],
            "error": [e or "" for e in data["error"]],
        }
    )
    return Table(
        f"{exp}-points",
        f"{exp}: measured points (decode: time per generated token)",
        data,
        view,
        note="A point that ran out of memory (oom), timed out or failed ends its mode's sweep; "
        "longer lengths are then recorded as skipped.",
    )


def _fit_rows(data: StoreData, exp: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    fits = data.runs_of("speed_fit")
    fits = fits[fits["experiment"] == exp]
    res = data.results_of(fits["id"])
    variants = dict(zip(fits["id"], fits["variant"], strict=True))
    slopes, cross = [], []
    for _, r in res.iterrows():
        t = r["tags"]
        base = {"variant": variants[r["run_id"]], "model": t.get("model", 0), "mode": t.get("mode")}
        if r["name"] == "slope":
            ci = t.get("ci95") or [None, None]
            fitted = is_number(t.get("n_points")) and t["n_points"] >= MIN_SLOPE_POINTS
            slopes.append(
                {
                    **base,
                    "quantity": t.get("quantity"),
                    "slope": r["value"] if fitted else None,
                    "ci95_lo": ci[0],
                    "ci95_hi": ci[1],
                    "stderr": t.get("stderr"),
                    "n_points": t.get("n_points"),
                    "T_min": t.get("T_min"),
                    "T_max": t.get("T_max"),
                    "error": t.get("error"),
                    "flags": "; ".join(t.get("flags") or []),
                }
            )
        elif r["name"] == "crossover_T":
            cross.append(
                {
                    **base,
                    "against": t.get("against"),
                    "T": r["value"],
                    "T_interp": t.get("T_interp"),
                    "status": t.get("status"),
                    "compared_T": str(t.get("compared_T") or ""),
                }
            )
    return pd.DataFrame(slopes), pd.DataFrame(cross)


def _too_few(r: pd.Series) -> bool:
    """No fit stored, or (in stores made before this rule) a slope through under 3 points."""
    return not is_number(r["slope"]) or not is_number(r["n_points"]) or r["n_points"] < MIN_SLOPE_POINTS


def _slope_text(r: pd.Series) -> str:
    if _too_few(r):
        n = int(r["n_points"]) if is_number(r["n_points"]) else 0
        return f"no fit ({too_few_text(n)})"
    if is_number(r["ci95_lo"]):
        return f"{r['slope']:.3g} [{r['ci95_lo']:.3g}, {r['ci95_hi']:.3g}]"
    return f"{r['slope']:.3g} (no interval)"


def _legend_slope(r: pd.Series) -> str:
    if _too_few(r):
        return "no fit: too few points"
    half = (r["ci95_hi"] - r["ci95_lo"]) / 2 if is_number(r["ci95_lo"]) else None
    return f"slope {r['slope']:.2f}" + (f" ± {half:.2f}" if half is not None else "")


CROSSOVER_WORDS = {"always": FASTER_AT_EVERY_T, "never": NEVER_FASTER, "no-baseline": NO_SPEED_BASELINE}


def crossover_text(r: pd.Series) -> str:
    """A stored crossover row (status, T, T_interp) in words: 'faster from T=512 (≈400 interpolated)'."""
    if r["status"] == "found":
        interp = f" (≈{r['T_interp']:,.0f} interpolated)" if is_number(r["T_interp"]) else ""
        return FASTER_FROM.format(T=num(r["T"])) + interp
    return CROSSOVER_WORDS.get(r["status"], str(r["status"]))


def _fit_tables(exp: str, slopes: pd.DataFrame, cross: pd.DataFrame, labels: dict[Any, str]) -> list[Table]:
    tables = []
    if not slopes.empty:
        sv = slopes[["variant", "model", "mode", "quantity"]].copy()
        sv["model"] = [labels.get(m, m) for m in sv["model"]]
        sv["log-log slope [95% CI]"] = slopes.apply(_slope_text, axis=1)
        sv["points"] = [num(n) for n in slopes["n_points"]]
        sv["flags"] = [f or "none" for f in slopes["flags"]]
        sv["T range"] = [
            f"{num(a)}–{num(b)}" if is_number(a) else MISSING
            for a, b in zip(slopes["T_min"], slopes["T_max"], strict=True)
        ]
        tables.append(Table(f"{exp}-slopes", f"{exp}: fitted slopes", slopes, sv))
    if not cross.empty:
        cv = cross[["variant", "model", "mode", "against"]].copy()
        cv["model"] = [labels.get(m, m) for m in cv["model"]]
        cv["crossover"] = cross.apply(crossover_text, axis=1)
        cv["compared T"] = cross["compared_T"]
        tables.append(Table(f"{exp}-crossover", f"{exp}: crossover length against softmax", cross, cv))
    return tables


def _figures(
    exp: str, pts: pd.DataFrame, slopes: pd.DataFrame, cross: pd.DataFrame, palette: figures.Palette
) -> Iterator[Figure | None]:
    """One figure per (model, mode), the known modes first."""
    labels = dict(zip(pts["model"], pts["model_label"], strict=True))
    for model in sorted(pts["model"].unique()):
        for mode in [m for m in MODES if m in set(pts["mode"])] + sorted(set(pts["mode"]) - set(MODES)):
            at = slopes[(slopes["model"] == model) & (slopes["mode"] == mode)] if not slopes.empty else slopes
            legend = {(r["variant"], r["quantity"]): _legend_slope(r) for _, r in at.iterrows()}
            cx = (
                cross[(cross["model"] == model) & (cross["mode"] == mode) & cross["status"].isin(["found"])]
                if not cross.empty
                else pd.DataFrame()
            )
            title = f"{exp}: {mode} against {'context' if mode == 'decode' else 'sequence length'}"
            title += f" ({labels[model]})" if pts["model"].nunique() > 1 else ""
            sub = pts[(pts["model"] == model) & (pts["mode"] == mode)]
            yield figures.speed_mode(sub, legend, cx, palette, mode, title, f"{exp}-{mode}-m{model}")


def speed_sections(data: StoreData, palette: figures.Palette) -> list[Section]:
    runs = data.runs_of("speed")
    sections = []
    for exp in dict.fromkeys(runs["experiment"]):  # none: no section, none in the contents
        pts = speed_points(data, [int(i) for i in runs.loc[runs["experiment"] == exp, "id"]])
        section = Section(
            f"Speed and memory: {exp}",
            intro=(
                "Time (median of the timed rounds) and peak memory against sequence length per mode; "
                "slopes are least-squares fits of log y on log T with a 95% interval; the crossover is "
                "the first length from which the variant stays faster than softmax."
            ),
        )
        sections.append(section)
        if pts.empty:
            section.missing = f"experiment {exp!r} stored no speed points"
            continue
        section.tables.append(_points_table(exp, pts))
        slopes, cross = _fit_rows(data, exp)
        if slopes.empty:
            section.notes.append("No slope fits stored for this experiment (its finalizer has not run).")
        section.tables += _fit_tables(exp, slopes, cross, dict(zip(pts["model"], pts["model_label"], strict=True)))
        section.figures += [f for f in _figures(exp, pts, slopes, cross, palette) if f]
    return sections
