"""The section for `scaling` experiments: held-out loss per model size and the fitted power
law L = a x^-b + c per variant (x = parameters, and training FLOPs when known), from the
finalizer's "scaling_fit" runs."""

from __future__ import annotations

import pandas as pd

from attnbench.report import figures
from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.selection import model_label
from attnbench.report.values import MISSING, MeanCI, ci_text, fact_text, mean_ci, num

_X = {"params": ("n_params", "parameters"), "flops": ("train_flops", "training FLOPs")}


def _points(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(table rows per variant x model size, figure points per variant x axis x size)."""
    rows, pts = [], []
    sizes_of = pd.Series([int(c.get("model", 0)) for c in runs["coords"]], index=runs.index)
    for (variant, _model), g in runs.groupby(["variant", sizes_of], sort=True):
        done = g[g["status"] == "done"]
        loss = mean_ci(s.get("val_loss") for s in done["summary"])
        sizes = {x: mean_ci(s.get(key) for s in done["summary"]).mean for x, (key, _) in _X.items()}
        rows.append(
            {
                "variant": variant,
                "model": model_label(g.iloc[0]["coords"], g.iloc[0]["config"]),
                "n_params": sizes["params"],
                "train_flops": sizes["flops"],
                "loss_mean": loss.mean,
                "loss_ci95_lo": loss.lo,
                "loss_ci95_hi": loss.hi,
                "seeds_done": len(done),
                "seeds": len(g),
                "statuses": ", ".join(sorted(set(g["status"]))),
                "flops_text": fact_text(done["summary"], "train_flops", lambda v: num(v, 3)),
            }
        )
        for x, size in sizes.items():
            if size and loss.mean is not None:
                pts.append({"variant": variant, "x": x, "size": size, "loss": loss.mean})
    return pd.DataFrame(rows), pd.DataFrame(pts)


def _fits(data: StoreData, exp: str) -> pd.DataFrame:
    fits = data.runs_of("scaling_fit")
    fits = fits[fits["experiment"] == exp]
    variants = dict(zip(fits["id"], fits["variant"], strict=True))
    res = data.results[
        data.results["run_id"].isin([int(i) for i in fits["id"]]) & (data.results["name"] == "power_law")
    ]
    return pd.DataFrame(
        [
            {
                "variant": variants[r["run_id"]],
                "x": r["tags"].get("x"),
                "a": r["tags"].get("a"),
                "b": r["tags"].get("b"),
                "c": r["tags"].get("c"),
                "rmse": r["tags"].get("rmse"),
                "n_points": r["tags"].get("n_points"),
                "error": r["tags"].get("error"),
            }
            for _, r in res.iterrows()
        ]
    )


def scaling_sections(data: StoreData, palette: figures.Palette) -> list[Section]:
    runs = data.runs_of("scaling")
    if runs.empty:
        return []  # the suite has no such experiment: no section, none in the contents
    sections = []
    for exp in dict.fromkeys(runs["experiment"]):
        rows, pts = _points(runs[runs["experiment"] == exp])
        section = Section(
            f"Scaling: {exp}",
            intro=(
                "Held-out loss per model size (mean over finished seeds, 95% interval) and the power law "
                "L(x) = a·x^-b + c fitted per variant against parameters x = N and training compute x = C."
            ),
        )
        view = pd.DataFrame(
            {
                "variant": rows["variant"],
                "model": rows["model"],
                "parameters": [num(v) for v in rows["n_params"]],
                "training FLOPs": rows["flops_text"],
                "held-out loss, mean ± 95% CI": [ci_text(_ci(r)) for _, r in rows.iterrows()],
                "status": rows["statuses"],
            }
        )
        section.tables.append(
            Table(f"{exp}-sizes", f"{exp}: loss per model size", rows.drop(columns="flops_text"), view)
        )
        fits = _fits(data, exp)
        if fits.empty:
            section.notes.append("No power-law fits stored for this experiment (its finalizer has not run).")
        else:
            fv = pd.DataFrame(
                {
                    "variant": fits["variant"],
                    "against": [_X.get(x, (x, x))[1] for x in fits["x"]],
                    "a": [num(v) for v in fits["a"]],
                    "b": [num(v) for v in fits["b"]],
                    "c": [num(v) for v in fits["c"]],
                    "rmse": [num(v, 3) for v in fits["rmse"]],
                    "sizes": [num(v) for v in fits["n_points"]],
                    "note": [e or "" for e in fits["error"]],
                }
            ).fillna(MISSING)
            section.tables.append(Table(f"{exp}-power-law", f"{exp}: fitted power laws", fits, fv))
        ok = fits.dropna(subset=["a", "b", "c"]) if not fits.empty else pd.DataFrame(columns=["variant", "x"])
        fig = (
            figures.scaling(pts, ok, palette, f"{exp}: loss against model size", f"{exp}-scaling")
            if not pts.empty
            else None
        )
        if fig:
            section.figures.append(fig)
        sections.append(section)
    return sections


def _ci(row: pd.Series) -> MeanCI:
    return MeanCI(row["loss_mean"], row["loss_ci95_lo"], row["loss_ci95_hi"], int(row["seeds_done"]))
