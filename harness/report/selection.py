"""Which runs stand for a variant in a training comparison: per (variant with its options,
model size), the grid point with the lowest mean held-out loss over its finished seeds.
Runs of one variant with different fixed ``variant_options`` are different rows; options a
grid sweeps are grid coordinates, chosen like any other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from attnbench.report.values import OPTION_PREFIX, grid_point, is_number, key_of, mean_ci


@dataclass(frozen=True)
class PointScore:
    """One grid point of a (variant, model size): mean held-out loss over finished seeds."""

    point: dict[str, Any]
    mean_loss: float | None
    done: int
    total: int


@dataclass(frozen=True)
class Selection:
    """The chosen grid point of one (experiment, variant, model size) and its runs."""

    experiment: str
    variant: str
    model: int
    model_label: str
    point: dict[str, Any]
    runs: pd.DataFrame  # the chosen point's runs, every seed and status
    points: list[PointScore]  # every grid point of the reported runs
    options: dict[str, Any] = field(default_factory=dict)  # fixed variant options (not swept by the grid)
    label: str = ""  # the variant, with the options that tell its rows apart: "linear (feature_map=relu)"
    tried: int = 0  # grid points tried in all, tuning rungs included
    grid: tuple[dict[str, Any], ...] = ()  # those points themselves

    @property
    def n_points(self) -> int:
        return max(self.tried, len(self.points))

    def chosen_run(self) -> pd.Series | None:
        """The one run that stands for this selection (what ``export --best`` exports): the
        finished seed of the chosen point with the lowest validation loss, chosen on validation
        like the point (ties: the lowest seed); None when no seed finished."""
        done = [
            (loss, seed, pos)
            for pos, (status, seed, summary) in enumerate(
                zip(self.runs["status"], self.runs["seed"], self.runs["summary"], strict=True)
            )
            if status == "done" and (loss := _loss(summary)) is not None
        ]
        if not done:
            return None
        return self.runs.iloc[min(done)[2]]

    def keys(self) -> list[str]:
        """The cell keys of the chosen point's runs, by seed."""
        return [
            str(k) for _, k in sorted(zip(self.runs["seed"], self.runs["cell_key"], strict=True), key=lambda sk: sk[0])
        ]


def fixed_options(variant: str, coords: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A run's variant options (from its model config) less those its grid point sweeps."""
    opts = (config.get("model") or {}).get("options") or {}
    swept = {k.removeprefix(f"{OPTION_PREFIX}{variant}.") for k in coords if k.startswith(f"{OPTION_PREFIX}{variant}.")}
    return {k: v for k, v in opts.items() if k not in swept} if isinstance(opts, dict) else {"options": opts}


def _labels(keys: list[tuple[str, str, int, str]], options: dict[str, dict[str, Any]]) -> dict[tuple, str]:
    """Per row key, the variant with the options that differ among that variant's rows."""
    by_variant: dict[tuple[str, str], set[str]] = {}
    for exp, variant, _model, okey in keys:
        by_variant.setdefault((exp, variant), set()).add(okey)
    out = {}
    for key in keys:
        exp, variant, _model, okey = key
        sets = [options[k] for k in sorted(by_variant[(exp, variant)])]
        differ = sorted({k for o in sets for k in o if any(o.get(k) != p.get(k) for p in sets)})
        mine = options[okey]
        out[key] = variant + (" (" + ", ".join(f"{k}={mine.get(k)}" for k in differ) + ")" if differ else "")
    return out


def model_label(coords: dict[str, Any], config: dict[str, Any]) -> str:
    model = config.get("model") or {}
    d, n = model.get("d_model", coords.get("d_model")), model.get("n_layer", coords.get("n_layer"))
    heads = model.get("n_head")
    return f"d{d} L{n}" + (f" H{heads}" if heads else "")


def _loss(summary: dict[str, Any]) -> float | None:
    v = summary.get("val_loss")
    return float(v) if isinstance(v, (int, float)) and is_number(v) else None


UNREPORTED_STAGES = ("tune", "replicate")


def choice_text(runs: pd.DataFrame, protocol: dict[str, Any]) -> str:
    """How an experiment's reported point was chosen on validation data, as its captions say it: by
    the criterion its tuning ran with (where tuning rungs are stored), else the lowest mean loss."""
    if not any(c.get("stage") == "tune" for c in runs["coords"]):
        return "the lowest mean validation loss over its seeds"
    accuracy = (protocol.get("tuning") or {}).get("criterion") == "accuracy"
    on = "validation accuracy beyond the null" if accuracy else "validation loss"
    return f"tuning on {on}, near-ties to the rate whose seeds agree (see Tuning)"


def reported_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a comparison reads: every run but the tuning rungs of successive halving
    (short budgets on few seeds; the survivor's runs at the full budget stand for it) and the
    replication runs (fresh seeds that test the decision, never part of it)."""
    keep = [c.get("stage") not in UNREPORTED_STAGES for c in runs["coords"]]
    return runs[pd.Series(keep, index=runs.index, dtype=bool)]


def select(runs: pd.DataFrame) -> list[Selection]:
    """One Selection per (experiment, variant with its fixed options, model) of ``runs``
    (train-like runs), in order of first appearance. A point's score is the mean held-out
    loss of its runs that finished ("done"); points with no finished run are chosen only
    when no point has one."""
    groups: dict[tuple[str, str, int, str], dict[str, list[int]]] = {}
    options: dict[str, dict[str, Any]] = {}
    tried: dict[tuple[str, str, int, str], dict[str, dict[str, Any]]] = {}  # every point tried, tuning included
    for exp, variant, coords, config in zip(
        runs["experiment"], runs["variant"], runs["coords"], runs["config"], strict=True
    ):
        okey = key_of(fixed_options(str(variant), coords, config))
        point = grid_point(coords)
        tried.setdefault((str(exp), str(variant), int(coords.get("model", 0)), okey), {})[key_of(point)] = point
    runs = reported_runs(runs)
    for pos, (exp, variant, coords, config) in enumerate(
        zip(runs["experiment"], runs["variant"], runs["coords"], runs["config"], strict=True)
    ):
        opts = fixed_options(str(variant), coords, config)
        okey = key_of(opts)
        options[okey] = opts
        key = (str(exp), str(variant), int(coords.get("model", 0)), okey)
        groups.setdefault(key, {}).setdefault(key_of(grid_point(coords)), []).append(pos)
    labels = _labels(list(groups), options)
    out: list[Selection] = []
    for (exp, variant, model, okey), points in groups.items():
        scored: list[tuple[PointScore, list[int]]] = []
        for positions in points.values():
            sub = runs.iloc[positions]
            done = sub[sub["status"] == "done"]
            m = mean_ci(_loss(s) for s in done["summary"])
            scored.append((PointScore(grid_point(sub.iloc[0]["coords"]), m.mean, len(done), len(sub)), positions))
        finite = [s for s in scored if s[0].mean_loss is not None]
        best = min(finite, key=lambda s: s[0].mean_loss or 0.0) if finite else scored[0]
        first = runs.iloc[best[1][0]]
        out.append(
            Selection(
                exp,
                variant,
                model,
                model_label(first["coords"], first["config"]),
                best[0].point,
                runs.iloc[best[1]],
                [s[0] for s in scored],
                options[okey],
                labels[(exp, variant, model, okey)],
                len(tried.get((exp, variant, model, okey), {})),
                tuple(tried.get((exp, variant, model, okey), {}).values()),
            )
        )
    return out
