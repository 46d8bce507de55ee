"""The report's opening answer: each variant against the baseline on the test split, at
its own chosen grid point (chosen on validation loss only), paired by seed; then the
speedup pivot (variant x T, the baseline's time over the variant's)."""

from __future__ import annotations

import statistics
from typing import Any

import pandas as pd

from attnbench.report.document import Section
from attnbench.report.document import Table
from attnbench.report.load import StoreData
from attnbench.report.selection import Selection
from attnbench.report.selection import select
from attnbench.report.values import MISSING
from attnbench.report.values import MeanCI
from attnbench.report.values import bytes_text
from attnbench.report.values import fact_text
from attnbench.report.values import is_number
from attnbench.report.values import key_of
from attnbench.report.values import mean_ci
from attnbench.report.values import num
from attnbench.report.values import point_text

DEFAULT_BASELINE = "softmax"
INTERVAL_METHOD = "paired t (Student t on the per-seed differences, n-1 df)"


def _protocol(runs: pd.DataFrame) -> dict[str, Any]:
    for s in runs["summary"]:
        if isinstance(s.get("protocol"), dict):
            return s["protocol"]
    return {}


def _by_seed(sel: Selection, key: str) -> dict[int, float]:
    done = sel.runs[sel.runs["status"] == "done"]
    return {int(seed): float(s[key]) for seed, s in zip(done["seed"], done["summary"]) if is_number(s.get(key))}


def paired_difference(variant: dict[int, float], baseline: dict[int, float]) -> tuple[list[float], MeanCI]:
    """Per-seed differences (variant - baseline) over the seeds both have, and their mean
    with a paired-t 95% interval."""
    diffs = [variant[s] - baseline[s] for s in sorted(set(variant) & set(baseline))]
    return diffs, mean_ci(diffs)


def reading(m: MeanCI, baseline: str) -> str:
    """The difference in words; an interval that spans zero is "no difference detected"."""
    if m.mean is None:
        return "no paired seeds"
    if m.lo is None or m.hi is None:
        return f"n={m.n}: no interval (give at least 2 seeds)"
    if m.lo <= 0 <= m.hi:
        return f"no difference detected at n={m.n}"
    return f"{'lower' if m.hi < 0 else 'higher'} loss than {baseline} (n={m.n})"


def speed_times(data: StoreData, mode: str) -> dict[str, dict[int, float]]:
    """Median time per (variant, T) of the ok points of one mode, over the suite's speed runs."""
    speed = data.runs_of("speed").set_index("id")
    res = data.results[data.results["run_id"].isin(speed.index) & (data.results["name"] == "time_s")]
    found: dict[str, dict[int, list[float]]] = {}
    for _, r in res.iterrows():
        t = r["tags"]
        if t.get("mode") == mode and t.get("status") == "ok" and is_number(r["value"]):
            found.setdefault(speed.loc[r["run_id"], "variant"], {}).setdefault(int(t["T"]), []).append(r["value"])
    return {v: {T: statistics.median(xs) for T, xs in Ts.items()} for v, Ts in found.items()}


def speedup_at_longest(times: dict[str, dict[int, float]], variant: str, baseline: str) -> tuple[float | None, int | None]:
    """(baseline time / variant time, T) at the longest T both timed."""
    common = sorted(set(times.get(variant, {})) & set(times.get(baseline, {})))
    if not common:
        return None, None
    T = common[-1]
    return times[baseline][T] / times[variant][T], T


def noisy_counts(data: StoreData) -> dict[str, int]:
    """Speed points stored as noisy, per variant."""
    speed = data.runs_of("speed").set_index("id")
    res = data.results[data.results["run_id"].isin(speed.index) & (data.results["name"] == "time_s")]
    out: dict[str, int] = {}
    for _, r in res.iterrows():
        if r["tags"].get("noisy"):
            v = speed.loc[r["run_id"], "variant"]
            out[v] = out.get(v, 0) + 1
    return out


def _gate_text(sel: Selection) -> str:
    failed = sorted({c for p in sel.runs["provenance"] for c in (p.get("gate") or {}).get("failed", [])})
    if failed:
        return "FAILED " + ", ".join(failed)
    return "passed" if any("gate" in p for p in sel.runs["provenance"]) else "not recorded"


def _speed_text(value: float | None, T: int | None) -> str:
    return MISSING if value is None else f"{value:.2f}x at T={T}"


def _row(data: StoreData, exp: str, sel: Selection, base: Selection | None, baseline: str,
         speed: dict[str, dict[str, dict[int, float]]], noisy: dict[str, int]) -> tuple[dict, dict]:
    test = _by_seed(sel, "test_loss")
    diffs, m = paired_difference(test, _by_seed(base, "test_loss")) if base is not None else ([], MeanCI(None, None, None, 0))
    acc = mean_ci(_by_seed(sel, "test_accuracy").values())
    train_x, train_T = speedup_at_longest(speed["train_step"], sel.variant, baseline)
    dec_x, dec_T = speedup_at_longest(speed["decode"], sel.variant, baseline)
    states = [s.get("state_elements") for s in sel.runs["summary"] if is_number(s.get("state_elements"))]
    flags = [f"{st} seed(s)" for st in sorted(set(sel.runs["status"]) - {"done"})]
    if noisy.get(sel.variant):
        flags.append(f"{noisy[sel.variant]} noisy speed point(s)")
    is_base = sel is base
    raw = {"experiment": exp, "variant": sel.label, "variant_options": key_of(sel.options), "model": sel.model_label,
           "chosen_point": point_text(sel.point),
           "grid_points": sel.n_points, "test_loss_mean": mean_ci(test.values()).mean,
           "diff_mean": m.mean, "diff_lo": m.lo, "diff_hi": m.hi, "n": m.n, "diffs_by_seed": ", ".join(
               f"{d:+.4f}" for d in diffs), "test_accuracy": acc.mean, "train_step_speedup": train_x,
           "train_step_T": train_T, "decode_speedup": dec_x, "decode_T": dec_T,
           "state_elements": states[0] if states else None, "gate": _gate_text(sel), "flags": "; ".join(flags)}
    view = {
        "experiment": exp, "variant": sel.label, "chosen point (of grid)": f"{point_text(sel.point)} (of {sel.n_points})",
        f"Δ test loss vs {baseline}, mean [95% CI]": "baseline" if is_base else (
            MISSING if m.mean is None else f"{m.mean:+.4f}" + (
                f" [{m.lo:+.4f}, {m.hi:+.4f}]" if m.lo is not None else "")),
        "n": num(m.n), "reading": "baseline" if is_base else reading(m, baseline),
        "test loss": num(raw["test_loss_mean"]), "test accuracy": num(acc.mean, 3),
        "train-step speedup": _speed_text(train_x, train_T), "decode speedup / token": _speed_text(dec_x, dec_T),
        "state size": fact_text(sel.runs["summary"], "state_elements", lambda v: bytes_text(4 * v)),
        "trust gate": raw["gate"], "flags": raw["flags"] or "none",
    }
    return raw, view


def _summary_table(data: StoreData) -> Table | None:
    train = data.runs_of("train")
    speed = {mode: speed_times(data, mode) for mode in ("train_step", "decode")}
    noisy = noisy_counts(data)
    raws, views, baselines = [], [], set()
    for exp in dict.fromkeys(train["experiment"]):
        runs = train[train["experiment"] == exp]
        if not any(is_number(s.get("test_loss")) for s in runs["summary"]):
            continue  # no test split: nothing to report against
        baseline = _protocol(runs).get("baseline", DEFAULT_BASELINE)
        baselines.add(baseline)
        sels = select(runs)
        bases: dict[int, Selection] = {}
        for s in sels:  # the baseline row per model size: the one with no differing options first
            if s.variant == baseline and (s.model not in bases or s.label == baseline):
                bases[s.model] = s
        for sel in sorted(sels, key=lambda s: (s is not bases.get(s.model), s.model, s.label)):
            raw, view = _row(data, exp, sel, bases.get(sel.model), baseline, speed, noisy)
            raws.append(raw)
            views.append(view)
    if not raws:
        return None
    note = (f"Each variant at its own chosen grid point (lowest mean validation loss over its seeds); the "
            f"loss shown is on the test split, which took no part in that choice. Δ = variant - "
            f"{' / '.join(sorted(baselines))} on the same seed (same batches in the same order); interval: "
            f"{INTERVAL_METHOD}. Speedups: baseline time / variant time at the longest T both timed "
            "(> 1 is faster). State size: fp32 recurrent state at the training length.")
    return Table("summary", "Summary: each variant against the baseline (test split)", pd.DataFrame(raws),
                 pd.DataFrame(views), note)


def _pivot_table(data: StoreData, baseline: str = DEFAULT_BASELINE) -> Table | None:
    rows = []
    for mode in ("forward", "train_step", "decode"):
        times = speed_times(data, mode)
        if baseline not in times:
            continue
        for variant in sorted(times):
            ratios = {T: times[baseline][T] / t for T, t in times[variant].items() if T in times[baseline]}
            rows.append({"mode": mode, "variant": variant, **{f"T={T}": ratios[T] for T in sorted(ratios)}})
    if not rows:
        return None
    raw = pd.DataFrame(rows)
    view = raw.copy()
    for c in view.columns[2:]:
        view[c] = [MISSING if not is_number(v) else f"{v:.2f}x" for v in view[c]]
    return Table("speedup-pivot", f"Speedup against {baseline} (its time / the variant's; > 1 is faster)", raw, view)


def comparison_sections(data: StoreData) -> list[Section]:
    """The opening section (empty list when the store has neither test-split runs nor speed)."""
    tables = [t for t in (_summary_table(data), _pivot_table(data)) if t is not None]
    if not tables:
        return []
    return [Section("Summary: the comparison", intro=(
        "The answer first: each variant's difference from the baseline on held-out test data, with its "
        "interval and n, and its speed against the baseline. Details follow in the sections below."),
        tables=tables)]
