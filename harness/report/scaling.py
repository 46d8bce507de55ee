"""The section for `scaling` experiments, from the finalizer's "scaling_fit" runs (the latest
per variant) and the cells each one fitted: held-out loss per model size; per variant and x
(non-embedding parameters N, training FLOPs C) the law the data support with bootstrap
intervals on b and c, its residuals and a goodness-of-fit line; each variant's exponent,
loss and curve against the baseline's (``scaling_fits``); and the log-log picture."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from attnbench.report import figures
from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.scaling_figure import Curve, scaling_figure
from attnbench.report.scaling_fits import cross_text, decision_text, fit_from_tags, goodness_text, law_text
from attnbench.report.selection import model_label
from attnbench.report.values import MISSING, MeanCI, ci_text, fact_text, mean_ci, num
from attnbench.stats.power_laws import MIN_SCALING_SIZES, SATURATING, ScalingFit
from attnbench.stats.scaling_comparison import compare_fits

_X = {"params": ("N", "non-embedding parameters N"), "flops": ("C", "training FLOPs C")}
BASELINE = "softmax"


def _by_variant_then_x(item: tuple[tuple[str, str], Any]) -> tuple[str, int]:
    (variant, x), _ = item
    return variant, list(_X).index(x) if x in _X else len(_X)


def _interval(v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return MISSING
    if lo is None or hi is None:
        return num(v, digits)
    return f"{num(v, digits)} [{num(lo, digits)}, {num(hi, digits)}]"


def _signed(v: float, lo: float, hi: float) -> str:
    return f"{v:+.3g} [{lo:+.3g}, {hi:+.3g}]"


def _latest_fits(data: StoreData, exp: str) -> dict[str, tuple[pd.Series, dict[str, dict[str, Any]]]]:
    """variant -> (its latest scaling_fit run, {x: the tags of its "power_law" row})."""
    fits = data.runs_of("scaling_fit")
    fits = fits[fits["experiment"] == exp].sort_values("id")
    out: dict[str, tuple[pd.Series, dict[str, dict[str, Any]]]] = {}
    for _, run in fits.iterrows():
        rows = data.results_of([run["id"]], "power_law")
        out[run["variant"]] = (run, {r["tags"].get("x"): r["tags"] for _, r in rows.iterrows()})
    return out


def _fitted_runs(runs: pd.DataFrame, latest: dict[str, tuple[pd.Series, Any]]) -> pd.DataFrame:
    """Each variant's runs its latest fit read (all its runs where no fit names them)."""
    keep = []
    for variant, g in runs.groupby("variant", sort=True):
        name = str(variant)
        cells = (latest[name][0]["config"].get("key_inputs") or {}).get("cells") if name in latest else None
        keep.append(g[g["cell_key"].isin(cells)] if cells else g)
    return pd.concat(keep) if keep else runs


def _sizes(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    sizes_of = pd.Series([int(c.get("model", 0)) for c in runs["coords"]], index=runs.index)
    for (variant, model), g in runs.groupby(["variant", sizes_of], sort=True):
        done = g[g["status"] == "done"]
        losses = [s.get("val_loss") for s in done["summary"]]
        loss = mean_ci(losses)
        finite = [v for v in losses if isinstance(v, (int, float)) and np.isfinite(v)]
        rows.append(
            {
                "variant": variant,
                "model_index": int(str(model)),
                "model": model_label(g.iloc[0]["coords"], g.iloc[0]["config"]),
                "n_params_non_embedding": mean_ci(s.get("n_params_non_embedding") for s in done["summary"]).mean,
                "n_params": mean_ci(s.get("n_params") for s in done["summary"]).mean,
                "train_flops": mean_ci(s.get("train_flops") for s in done["summary"]).mean,
                "lr": mean_ci(s.get("lr") for s in done["summary"]).mean,
                "tokens": mean_ci(s.get("tokens") for s in done["summary"]).mean,
                "loss_mean": loss.mean,
                "loss_ci95_lo": loss.lo,
                "loss_ci95_hi": loss.hi,
                "loss_min": min(finite) if finite else None,
                "loss_max": max(finite) if finite else None,
                "seeds_done": len(done),
                "seeds": len(g),
                "statuses": ", ".join(sorted(set(g["status"]))),
                "flops_text": fact_text(done["summary"], "train_flops", lambda v: f"{v:.3g}"),
            }
        )
    return pd.DataFrame(rows)


def _sizes_table(exp: str, rows: pd.DataFrame) -> Table:
    view = pd.DataFrame(
        {
            "variant": rows["variant"],
            "model": rows["model"],
            "non-embedding parameters": [num(v) for v in rows["n_params_non_embedding"]],
            "parameters": [num(v) for v in rows["n_params"]],
            "training FLOPs": rows["flops_text"],
            "tokens": [num(v) for v in rows["tokens"]],
            "learning rate": [num(v, 3) for v in rows["lr"]],
            "held-out loss, mean ± 95% CI": [
                ci_text(MeanCI(r["loss_mean"], r["loss_ci95_lo"], r["loss_ci95_hi"], int(r["seeds_done"])))
                for _, r in rows.iterrows()
            ],
            "status": rows["statuses"],
        }
    )
    return Table(f"{exp}-sizes", f"{exp}: loss per model size", rows.drop(columns="flops_text"), view)


def _fit_rows(latest: dict[str, tuple[pd.Series, dict[str, dict[str, Any]]]]) -> tuple[list[dict], dict]:
    """Table rows of every stored fit, and the fits rebuilt: {(variant, x): (ScalingFit, tags)}."""
    rows, rebuilt = [], {}
    for variant, (_, by_x) in sorted(latest.items()):
        for x, t in by_x.items():
            fit = fit_from_tags(t)
            row = {"variant": variant, "x": x, "n_points": t.get("n_points"), "error": t.get("error")}
            if fit is None:
                n = t.get("n_points") or 0
                if not t.get("error") and n < MIN_SCALING_SIZES:
                    row["error"] = f"{n} sizes: too few to fit (a scaling law needs {MIN_SCALING_SIZES} sizes)"
                rows.append(row)
                continue
            rebuilt[(variant, x)] = (fit, t)
            b_lo, b_hi = t.get("b_ci95") or (None, None)
            c_lo, c_hi = t.get("c_ci95") or (None, None)
            unit = _X.get(x, (x, x))[0]
            row |= {
                "law": fit.law,
                "a": t.get("a"),
                "b": t.get("b"),
                "b_ci95_lo": b_lo,
                "b_ci95_hi": b_hi,
                "c": t.get("c"),
                "c_ci95_lo": c_lo,
                "c_ci95_hi": c_hi,
                "f_p": fit.f_p,
                "lof_p": fit.lof_p,
                "inflation": fit.inflation,
                "rmse": t.get("rmse"),
                "law_text": law_text(fit),
                "goodness": goodness_text(fit, unit),
            }
            rows.append(row)
    return rows, rebuilt


def _fits_table(exp: str, rows: list[dict]) -> Table:
    data = pd.DataFrame(rows)
    get = lambda r, k: r.get(k) if k in r and not pd.isna(r.get(k)) else None  # noqa: E731
    view = pd.DataFrame(
        {
            "variant": data["variant"],
            "against": [_X.get(x, (x, x))[1] for x in data["x"]],
            "law the data support": [r.get("law_text") or r.get("error") or MISSING for r in rows],
            "b, 95% CI": [_interval(get(r, "b"), get(r, "b_ci95_lo"), get(r, "b_ci95_hi")) for r in rows],
            "c, 95% CI": [
                _interval(get(r, "c"), get(r, "c_ci95_lo"), get(r, "c_ci95_hi")) if get(r, "law") == SATURATING else "-"
                for r in rows
            ],
            "a": [num(get(r, "a"), 4) for r in rows],
            "goodness of fit": [r.get("goodness") or "" for r in rows],
            "sizes": [num(v) for v in data["n_points"]],
        }
    ).fillna(MISSING)
    return Table(
        f"{exp}-power-law",
        f"{exp}: fitted scaling laws",
        data.drop(columns=[c for c in ("law_text", "goodness") if c in data]),
        view,
    )


def _residuals_table(exp: str, rebuilt: dict) -> Table | None:
    rows = []
    for (variant, x), (fit, t) in sorted(rebuilt.items(), key=_by_variant_then_x):
        fitted = fit.means - fit.residuals()
        dof = sum(len(g) - 1 for g in fit.groups)
        pooled = (
            math.sqrt(sum(float(((np.asarray(g) - np.mean(g)) ** 2).sum()) for g in fit.groups) / dof) if dof else 0
        )
        for i, size in enumerate(fit.x):
            g = np.asarray(fit.groups[i])
            se = pooled / math.sqrt(len(g)) if pooled > 0 else None
            rows.append(
                {
                    "variant": variant,
                    "x": x,
                    "model_index": (t.get("models") or [None] * len(fit.x))[i],
                    "size": size,
                    "loss_mean": float(fit.means[i]),
                    "fitted": float(fitted[i]),
                    "residual": float(fit.means[i] - fitted[i]),
                    "seed_se": se,
                    "seeds": len(g),
                }
            )
    if not rows:
        return None
    data = pd.DataFrame(rows)
    view = pd.DataFrame(
        {
            "variant": data["variant"],
            "against": [_X.get(x, (x, x))[0] for x in data["x"]],
            "size": [f"{v:.4g}" for v in data["size"]],
            "mean loss": [num(v, 4) for v in data["loss_mean"]],
            "fitted": [num(v, 4) for v in data["fitted"]],
            "residual": [f"{v:+.4f}" for v in data["residual"]],
            "residual / seed SE (pooled)": [
                f"{r / s:+.2f}" if s and not pd.isna(s) and s > 0 else MISSING
                for r, s in zip(data["residual"], data["seed_se"], strict=True)
            ],
            "seeds": data["seeds"],
        }
    )
    return Table(f"{exp}-residuals", f"{exp}: residuals of the supported laws (mean loss - fitted)", data, view)


def _comparison_row(
    variant: str, x: str, mine: tuple, theirs: tuple, baseline: str, margin: float | None, labels: dict
) -> dict[str, Any]:
    """One variant's law against the baseline's on one x: exponents, loss gap, where the curves cross."""
    (fit, t), (base, bt) = mine, theirs
    c = compare_fits(fit, base, margin, (list(t.get("models") or []), list(bt.get("models") or [])))
    unit = _X.get(x, (x, x))[0]
    return {
        "variant": variant,
        "x": x,
        "law": c.law,
        "b_diff": c.diff,
        "b_diff_ci95_lo": c.ci95[0],
        "b_diff_ci95_hi": c.ci95[1],
        "b_diff_ci90_lo": c.ci90[0],
        "b_diff_ci90_hi": c.ci90[1],
        "decision": decision_text(
            c.outcome,
            c.within,
            margin,
            baseline,
            [n for n, f in ((variant, fit), (baseline, base)) if f.inflation > 1],
        ),
        "margin": margin,
        "gap_model": labels.get((variant, c.gap_model), c.gap_model),
        "loss_gap": c.gap,
        "loss_gap_ci95_lo": c.gap_ci95[0] if c.gap_ci95 else None,
        "loss_gap_ci95_hi": c.gap_ci95[1] if c.gap_ci95 else None,
        "cross": c.cross,
        "cross_ci95_lo": c.cross_ci95[0] if c.cross_ci95 else None,
        "cross_ci95_hi": c.cross_ci95[1] if c.cross_ci95 else None,
        "cross_share": c.cross_share,
        "cross_text": cross_text(c, unit),
    }


def _comparison_table(exp: str, rebuilt: dict, baseline: str, margin: float | None, labels: dict) -> Table | None:
    rows = [
        _comparison_row(variant, x, pair, rebuilt[(baseline, x)], baseline, margin, labels)
        for (variant, x), pair in sorted(rebuilt.items(), key=_by_variant_then_x)
        if variant != baseline and (baseline, x) in rebuilt
    ]
    if not rows:
        return None
    data = pd.DataFrame(rows)
    view = pd.DataFrame(
        {
            "variant": data["variant"],
            "against": [_X.get(x, (x, x))[1] for x in data["x"]],
            "law compared": ["a·x^-b + c" if law == SATURATING else "a·x^-b" for law in data["law"]],
            f"b - b_{baseline}, 95% CI": [_signed(r["b_diff"], r["b_diff_ci95_lo"], r["b_diff_ci95_hi"]) for r in rows],
            "decision": data["decision"],
            "loss gap at the largest size, 95% CI": [
                f"{_signed(r['loss_gap'], r['loss_gap_ci95_lo'], r['loss_gap_ci95_hi'])} ({r['gap_model']})"
                if r["loss_gap"] is not None
                else MISSING
                for r in rows
            ],
            "curves cross at": data["cross_text"],
        }
    )
    return Table(
        f"{exp}-vs-{baseline}",
        f"{exp}: scaling against {baseline}",
        data.drop(columns="cross_text"),
        view,
        note=(
            f"b - b_{baseline} > 0: the loss falls faster with size than {baseline}'s (steeper). Intervals: bootstrap "
            "over seeds, each variant resampled separately, widened for few seeds and for a law's misses; crossings: "
            "percentile interval."
        ),
    )


def _curves(rows: pd.DataFrame, rebuilt: dict) -> list[Curve]:
    """Per variant: its points against non-embedding parameters (total parameters where its
    runs recorded no non-embedding count: a store from before they did) and its fit."""
    out = []
    for variant, g in rows.groupby("variant", sort=True):
        key = "n_params_non_embedding" if g["n_params_non_embedding"].notna().any() else "n_params"
        g = g.dropna(subset=[key, "loss_mean"]).sort_values(key)
        if g.empty:
            continue
        fit: ScalingFit | None = rebuilt.get((variant, "params"), (None, None))[0]
        out.append(
            Curve(
                str(variant),
                list(g[key]),
                list(g["loss_mean"]),
                list(g["loss_min"]),
                list(g["loss_max"]),
                fit if key == "n_params_non_embedding" else None,
                key == "n_params_non_embedding",
            )
        )
    return out


def _usable_margin(value: Any) -> float | None:
    """A stored margin the comparison can use, a finite positive number; else None (a store
    written before the suite refused them may hold .inf or true)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def scaling_sections(data: StoreData, palette: figures.Palette) -> list[Section]:
    runs = data.runs_of("scaling")
    if runs.empty:
        return []  # the suite has no such experiment: no section, none in the contents
    sections = []
    for exp in dict.fromkeys(runs["experiment"]):
        latest = _latest_fits(data, exp)
        rows = _sizes(_fitted_runs(runs[runs["experiment"] == exp], latest))
        tags = [t for _, by_x in latest.values() for t in by_x.values()]
        baseline = next((t["baseline"] for t in tags if t.get("baseline")), BASELINE)
        margin = next((m for t in tags if (m := _usable_margin(t.get("exponent_margin"))) is not None), None)
        section = Section(
            f"Scaling: {exp}",
            intro=(
                "Held-out loss per model size, and per variant the laws L(x) = a·x^-b + c and L(x) = a·x^-b fitted "
                "to the mean loss per size against non-embedding parameters x = N and training compute x = C. "
                "The irreducible term c is kept only where an F test rejects c = 0 at 5%. Intervals on b and c: "
                "bootstrap over seeds resampled within each size, widened for few seeds and, where a law misses its "
                "sizes by more than seeds vary, for the misses. With fewer than "
                f"{MIN_SCALING_SIZES} sizes there is no fit. Each variant's b is compared with {baseline}'s."
            ),
        )
        section.tables.append(_sizes_table(exp, rows))
        if not latest:
            section.notes.append("No scaling fits stored for this experiment (its finalizer has not run).")
        fit_rows, rebuilt = _fit_rows(latest)
        if fit_rows:
            section.tables.append(_fits_table(exp, fit_rows))
        if (t := _residuals_table(exp, rebuilt)) is not None:
            section.tables.append(t)
        labels = {(r["variant"], r["model_index"]): r["model"] for _, r in rows.iterrows()}
        if (t := _comparison_table(exp, rebuilt, baseline, margin, labels)) is not None:
            section.tables.append(t)
        if margin is None:
            section.notes.append(
                f"No equivalence margin on b - b_{baseline} is set, so no variant is called to scale like "
                f"{baseline}: a decision is steeper, shallower or undetermined."
            )
        if latest and not any(v == baseline for v, _ in rebuilt):
            section.notes.append(f"{baseline} has no fit here: no variant is compared with it.")
        if not rows.empty:
            fig = scaling_figure(
                _curves(rows, rebuilt), baseline, palette, f"{exp}: loss against model size", f"{exp}-scaling"
            )
            if fig:
                section.figures.append(fig)
        sections.append(section)
    return sections
