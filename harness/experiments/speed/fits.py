"""The `speed` finalizer: log-log slopes of time and of peak memory against T per
variant, mode and model size, and the crossover length against the softmax baseline,
stored as one "speed_fit" run per (experiment, variant).

Rows (see the report's row formats): "slope" (value: fitted exponent; tags mode,
quantity, T_min, T_max, stderr, ci95, n_points) and "crossover_T" (value: first T from
which the variant stays faster than softmax, null if never; tags mode, against, status,
device). Seeds are merged by the median per T before fitting.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import torch

from attnbench.experiments.derived import save_derived
from attnbench.plan.cells import Cell
from attnbench.plan.speed_spec import SpeedSpec
from attnbench.registry.identity import code_hash
from attnbench.stats.slopes import MIN_SLOPE_POINTS, crossover, loglog_slope, too_few_text
from attnbench.store.database import Result, Store
from attnbench.store.provenance import device_name

BASELINE = "softmax"
QUANTITIES = {"time_s": "time", "peak_memory_bytes": "memory"}
MIN_FIT_POINTS = MIN_SLOPE_POINTS  # with fewer points at T >= fit_T_min, the longest ok points are used
MAX_CI_HALF = 0.5  # a slope whose 95% interval is wider than +-this is flagged

Curve = dict[int, float | None]  # T -> value (None: the point failed or was skipped)
Curves = dict[tuple[str, str], Curve]  # (mode, quantity) -> curve


def run_curves(store: Store, run_id: int) -> Curves:
    curves: Curves = {}
    for r in store.results(run_id):
        quantity = QUANTITIES.get(r["name"])
        if quantity is None:
            continue
        tags, value = r["tags"], r["value"]
        ok = tags.get("status") == "ok"
        curves.setdefault((tags["mode"], quantity), {})[int(tags["T"])] = (
            float(value) if ok and value is not None else None
        )
    return curves


def noisy_lengths(store: Store, runs: list[dict[str, Any]]) -> dict[str, set[int]]:
    """Per mode, the lengths at which any of these runs stored a noisy time."""
    out: dict[str, set[int]] = {}
    for run in runs:
        for r in store.results(run["id"]):
            if r["name"] == "time_s" and r["tags"].get("noisy"):
                out.setdefault(r["tags"]["mode"], set()).add(int(r["tags"]["T"]))
    return out


def fit_flags(tags: dict[str, Any], noisy_Ts: set[int]) -> list[str]:
    """Why a fitted slope should not be trusted: noisy points in its range, or a wide interval."""
    flags = []
    lo, hi = tags.get("T_min"), tags.get("T_max")
    used = sorted(T for T in noisy_Ts if lo is not None and hi is not None and lo <= T <= hi)
    if used:
        flags.append(f"rests on noisy point(s) at T={used}")
    ci = tags.get("ci95")
    if ci and (ci[1] - ci[0]) / 2 > MAX_CI_HALF:
        flags.append(f"95% interval [{ci[0]:.2f}, {ci[1]:.2f}] is wider than +-{MAX_CI_HALF}")
    return flags


def curves_by_model(store: Store, runs: list[dict[str, Any]]) -> dict[int, Curves]:
    """Curves per model index, seeds merged by the median of their ok values per T."""
    grouped: dict[int, list[Curves]] = {}
    for run in runs:
        grouped.setdefault(int(run["coords"].get("model", 0)), []).append(run_curves(store, run["id"]))
    out: dict[int, Curves] = {}
    for model, sets in grouped.items():
        merged: Curves = {}
        for key in {k for s in sets for k in s}:
            Ts = sorted({T for s in sets for T in s.get(key, {})})
            vals = {T: [v for s in sets if (v := s.get(key, {}).get(T)) is not None] for T in Ts}
            merged[key] = {T: (statistics.median(v) if v else None) for T, v in vals.items()}
        out[model] = merged
    return out


def _slope_row(mode: str, quantity: str, curve: Curve, fit_T_min: int, extra: dict[str, Any]) -> Result:
    ok = {T: v for T, v in curve.items() if v is not None}
    fit = loglog_slope(list(ok), list(ok.values()), fit_T_min)
    if fit is None or fit.n_points < MIN_FIT_POINTS:  # too few long points: the longest ones
        longest = sorted(T for T, v in ok.items() if v > 0)[-MIN_FIT_POINTS:]
        alt = loglog_slope(longest, [ok[T] for T in longest])
        if alt is not None and (fit is None or alt.n_points > fit.n_points):
            fit = alt
    tags: dict[str, Any] = {"mode": mode, "quantity": quantity, "fit_T_min": fit_T_min, **extra}
    if fit is None:
        return Result(
            "slope",
            None,
            "",
            {
                **tags,
                "T_min": None,
                "T_max": None,
                "stderr": None,
                "ci95": None,
                "n_points": len(ok),
                "error": too_few_text(len(ok)),
            },
        )
    if fit.n_points < MIN_SLOPE_POINTS:  # stored as no fit: two points say nothing about the exponent's error
        return Result(
            "slope",
            None,
            "",
            {
                **tags,
                "T_min": fit.T_min,
                "T_max": fit.T_max,
                "stderr": None,
                "ci95": None,
                "n_points": fit.n_points,
                "error": too_few_text(fit.n_points),
            },
        )
    return Result(
        "slope",
        fit.slope,
        "",
        {
            **tags,
            "T_min": fit.T_min,
            "T_max": fit.T_max,
            "stderr": fit.stderr,
            "ci95": list(fit.ci95) if fit.ci95 else None,
            "n_points": fit.n_points,
            "log_intercept": fit.intercept,
        },
    )


def fit_results(
    curves: Curves,
    baseline: Curves | None,
    fit_T_min: int,
    device: str,
    extra: dict[str, Any] | None = None,
    with_crossover: bool = True,
    noisy: dict[str, set[int]] | None = None,
) -> list[Result]:
    """Slope rows for every (mode, quantity), each with its ``flags`` (noisy time points,
    see ``noisy_lengths``, or a wide interval) and, when asked, a crossover row per mode
    (status "no-baseline" when ``baseline`` is None or lacks the mode)."""
    extra = extra or {}
    rows = [_slope_row(mode, q, curve, fit_T_min, extra) for (mode, q), curve in sorted(curves.items())]
    for row in rows:
        noisy_Ts = (noisy or {}).get(row.tags["mode"], set()) if row.tags["quantity"] == "time" else set()
        row.tags["flags"] = fit_flags(row.tags, noisy_Ts)
    if not with_crossover:
        return rows
    for mode in sorted({m for m, q in curves if q == "time"}):
        cx = crossover(curves[(mode, "time")], (baseline or {}).get((mode, "time"), {}))
        rows.append(
            Result(
                "crossover_T",
                cx.T,
                "",
                {
                    "mode": mode,
                    "against": BASELINE,
                    "status": cx.status,
                    "device": device,
                    "T_interp": cx.T_interp,
                    "compared_T": cx.compared,
                    **extra,
                },
            )
        )
    return rows


def _dims(model: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if k != "options"}


def _canonical(obj: Any) -> str:
    return json.dumps(json.loads(json.dumps(obj, default=str)), sort_keys=True)


def stored_baseline(store: Store, cells: list[Cell]) -> list[dict[str, Any]]:
    """Softmax runs of this experiment already in the store with the same speed settings,
    model sizes and device (when the baseline is not among the cells being run)."""
    first = cells[0]
    dims = {int(c.coords["model"]): _canonical(_dims(c.model.to_dict())) for c in cells}
    spec, device = _canonical(first.spec.model_dump()), first.key_inputs.get("device")
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for run in store.runs(suite=first.suite, kind="speed"):
        cfg = run["config"]
        if (
            run["variant"] != BASELINE
            or run["experiment"] != first.experiment
            or run["status"] != "done"
            or cfg.get("key_inputs", {}).get("device") != device
            or _canonical(cfg.get(first.kind)) != spec
        ):
            continue
        model = int(run["coords"].get("model", 0))
        if dims.get(model) == _canonical(_dims(cfg.get("model", {}))):
            found[(model, run["seed"])] = run  # the latest stored run wins
    return list(found.values())


def finalize_speed(cells: list[Cell], store: Store, device: torch.device) -> None:
    """Store one "speed_fit" run per variant of the experiment (idempotent)."""
    if not cells:
        return
    first = cells[0]
    dev = device_name(device)
    runs = {
        r["cell_key"]: r for r in store.runs(suite=first.suite, kind="speed") if r["experiment"] == first.experiment
    }
    base_runs = [runs[c.key] for c in cells if c.variant == BASELINE and c.key in runs]
    base_runs = base_runs or stored_baseline(store, cells)
    base_curves = curves_by_model(store, base_runs)
    dims = {int(c.coords["model"]): {"d_model": c.model.d_model, "n_layer": c.model.n_layer} for c in cells}
    fit_T_min = first.spec_as(SpeedSpec).fit_T_min
    for variant in dict.fromkeys(c.variant for c in cells):
        vruns = [runs[c.key] for c in cells if c.variant == variant and c.key in runs]
        if not vruns:
            continue
        results: list[Result] = []
        for model, curves in sorted(curves_by_model(store, vruns).items()):
            results += fit_results(
                curves,
                base_curves.get(model),
                fit_T_min,
                dev,
                {"model": model, **dims.get(model, {})},
                with_crossover=variant != BASELINE,
                noisy=noisy_lengths(store, vruns),
            )
        inputs = {
            "suite": first.suite,
            "experiment": first.experiment,
            "variant": variant,
            "device": dev,
            "cells": sorted(r["cell_key"] for r in vruns),
            "fit_T_min": fit_T_min,
            "baseline": [] if variant == BASELINE else sorted(r["cell_key"] for r in base_runs),
            "code": code_hash(
                "attnbench.stats.slopes", "attnbench.stats.intervals", "attnbench.experiments.speed.fits"
            ),
        }
        save_derived(
            store,
            kind="speed_fit",
            suite=first.suite,
            experiment=first.experiment,
            variant=variant,
            inputs=inputs,
            device=device,
            results=results,
            summary={"cells": len(vruns), "baseline_cells": len(inputs["baseline"]), "fit_T_min": fit_T_min},
        )
