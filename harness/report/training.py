"""Sections for `train` experiments: each variant at the experiment's equal budget (held-out
loss and bits per byte with 95% intervals over seeds at its best grid point; facts; the
budget actually consumed; status), the grid, loss curves, and synthetic-task accuracy by
difficulty coordinates."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from attnbench.report import figures
from attnbench.report.document import Figure, Section, Table
from attnbench.report.floors import floor_note
from attnbench.report.gate import gate_text
from attnbench.report.load import StoreData
from attnbench.report.paired import protocol_of
from attnbench.report.selection import Selection, choice_text, select
from attnbench.report.task_scores import task_rows, task_section
from attnbench.report.values import (
    MISSING,
    bytes_text,
    ci_text,
    fact_text,
    is_number,
    key_of,
    mean_ci,
    num,
    point_text,
    seconds_text,
)

AUX_PREFIX = "train/aux/"
INTRO = (
    "Each row is one variant with its options (and model size) at the experiment's common budget; "
    "runs with different variant_options are different rows. Held-out values "
    "are the mean over finished seeds with a two-sided 95% Student-t interval, at the chosen grid point "
    "(tuned: by the tuning criterion, see Tuning; else the lowest mean validation loss). These are "
    "validation values, the split the choice read, "
    "so they flatter larger grids; where the data has a test split, the Summary at the top reports "
    "the chosen points on it. Facts: parameters measured; state size and FLOPs per "
    "token as declared by the variant at the training length."
)
_HEADLINE = (
    ("loss", "val_loss", "held-out loss (nats/token)"),
    ("bpb", "val_bpb", "bits per byte"),
    ("accuracy", "val_accuracy", "accuracy"),
)
_COST = (
    "n_params",
    "state_elements",
    "fwd_flops_per_token",
    "tokens_per_s",
    "peak_memory_bytes",
    "budget",
    "tokens",
    "steps",
    "train_time_s",
)


def aux_names(data: StoreData, run_ids: list[int]) -> list[str]:
    """Auxiliary-loss metric names (``train/aux/NAME``) recorded by these runs."""
    names = data.metrics_of(run_ids)["name"]
    return sorted({n.removeprefix(AUX_PREFIX) for n in names if n.startswith(AUX_PREFIX)})


def variant_labels(data: StoreData) -> dict[str, str]:
    """Legend labels: variants that add an auxiliary training objective say so."""
    out = {}
    for variant, ids in data.runs.groupby("variant")["id"]:
        aux = aux_names(data, list(ids))
        out[str(variant)] = f"{variant} (+aux: {', '.join(aux)})" if aux else str(variant)
    return out


def _final_aux(data: StoreData, run_ids: list[int], name: str) -> float | None:
    rows = data.metrics_of(run_ids, AUX_PREFIX + name)
    finals = [g.sort_values("step")["value"].iloc[-1] for _, g in rows.groupby("run_id")]
    return mean_ci(finals).mean


def _status(runs: pd.DataFrame) -> str:
    counts = Counter(runs["status"])
    if set(counts) == {"done"}:
        return "done"
    parts = []
    for _, r in runs[runs["status"] != "done"].iterrows():
        step = r["summary"].get("diverged_at_step")
        at = f" at step {step}" if step is not None else ""
        parts.append(f"{r['status']}{at} (seed {r['seed']})")
    return "; ".join(parts) + f"; done {counts.get('done', 0)}/{len(runs)}"


def _no_memory(runs: pd.DataFrame) -> str:
    """Why a training row has no peak memory: CPU runs do not measure it."""
    cpu = all(str(p.get("device", "")).startswith("cpu") for p in runs["provenance"])
    return "not measured (CPU)" if cpu else "not recorded"


def _mean(runs: pd.DataFrame, key: str) -> float | None:
    return mean_ci(s.get(key) for s in runs["summary"]).mean


def _budget(runs: pd.DataFrame) -> str:
    """The budget as 'steps=60' ('; '-joined when the runs differ)."""
    budgets = {
        ", ".join(f"{k}={num(v) if is_number(v) else v}" for k, v in sorted(b.items()))
        if isinstance(b, dict)
        else str(b)
        for b in (s.get("budget") for s in runs["summary"])
        if b
    }
    return "; ".join(sorted(budgets)) or MISSING


def _row(data: StoreData, sel: Selection) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(raw values, quality view, facts-and-budget view) of one selection (means over seeds)."""
    runs = sel.runs
    done = runs[runs["status"] == "done"]
    ids = [int(i) for i in runs["id"]]
    aux = aux_names(data, ids)
    raw: dict[str, Any] = {
        "experiment": sel.experiment,
        "variant": sel.label,
        "variant_options": key_of(sel.options),
        "model": sel.model_label,
        "objective": "cross-entropy + auxiliary: " + ", ".join(aux) if aux else "cross-entropy",
        "grid_point": point_text(sel.point),
        "grid_points_tried": sel.n_points,
        "key": None if (chosen := sel.chosen_run()) is None else chosen["cell_key"],
        "keys": " ".join(sel.keys()),
        "seeds_done": len(done),
        "seeds": len(runs),
    }
    view: dict[str, Any] = {
        "variant": sel.label,
        "model": sel.model_label,
        "objective": raw["objective"],
        "chosen point": raw["grid_point"] if sel.n_points == 1 else f"{raw['grid_point']} (best of {sel.n_points})",
    }
    for short, key, label in _HEADLINE:
        m = mean_ci((s.get(key) for s in done["summary"]), bounds=(0.0, 1.0) if short == "accuracy" else None)
        if m.n or any(key in s for s in runs["summary"]):
            raw.update({f"{short}_mean": m.mean, f"{short}_ci95_lo": m.lo, f"{short}_ci95_hi": m.hi})
            view[f"{label}, mean ± 95% CI"] = ci_text(m)
    for name in aux:
        value = _final_aux(data, ids, name)
        raw[f"aux_{name}_final"] = value
        view[f"aux loss {name} (final, unweighted)"] = num(value)
    facts = {k: _mean(runs, k) for k in _COST if k != "budget"}
    raw.update(facts)
    raw.update(budget=_budget(runs), status=_status(runs), trust_gate=gate_text(runs["provenance"]))
    state = fact_text(runs["summary"], "state_elements")
    view.update(
        {
            "parameters": num(facts["n_params"]),
            "state (elements at T)": state,
            "status": raw["status"],
            "trust gate": raw["trust_gate"],
        }
    )
    return raw, view, _cost(sel, facts, state, raw["budget"])


def _cost(sel: Selection, facts: dict[str, Any], state: str, budget: str) -> dict[str, Any]:
    """The facts-and-budget view of one selection (``facts``: the means over its runs)."""
    runs = sel.runs
    mlp = (runs.iloc[0]["config"].get("model") or {}).get("mlp_hidden") if len(runs) else None
    return {
        "variant": sel.label,
        "model": sel.model_label,
        "parameters": num(facts["n_params"]) + (f" (MLP width {mlp}: matched)" if mlp else ""),
        "state (elements at T)": state,
        "FLOPs/token (fwd)": fact_text(runs["summary"], "fwd_flops_per_token", lambda v: num(v, 3)),
        "tokens/s": num(facts["tokens_per_s"], 3),
        "peak memory": bytes_text(facts["peak_memory_bytes"]) if facts["peak_memory_bytes"] else _no_memory(runs),
        "budget": budget,
        "tokens used": num(facts["tokens"]),
        "steps": num(facts["steps"]),
        "train seconds": seconds_text(facts["train_time_s"]),
    }


def _grid_table(exp: str, sels: list[Selection]) -> Table | None:
    if all(s.n_points == 1 for s in sels):
        return None
    rows = []
    for s in sels:
        for p in s.points:
            rows.append(
                {
                    "variant": s.label,
                    "model": s.model_label,
                    "grid_point": point_text(p.point),
                    "mean_loss": p.mean_loss,
                    "seeds_done": p.done,
                    "seeds": p.total,
                    "chosen": p.point == s.point,
                }
            )
    data = pd.DataFrame(rows)
    view = pd.DataFrame(
        {
            "variant": data["variant"],
            "model": data["model"],
            "grid point": data["grid_point"],
            "held-out loss (mean over finished seeds)": [num(v) for v in data["mean_loss"]],
            "seeds finished": [f"{d}/{t}" for d, t in zip(data["seeds_done"], data["seeds"], strict=True)],
            "chosen": ["chosen" if c else "" for c in data["chosen"]],
        }
    )
    return Table(f"{exp}-grid", f"{exp}: every grid point", data, view)


def _curves(data: StoreData, sels: list[Selection]) -> pd.DataFrame:
    frames = []
    for s in sels:
        ids = [int(i) for i in s.runs["id"]]
        seeds = dict(zip(s.runs["id"], s.runs["seed"], strict=True))
        per_token = mean_ci(r.get("train_flops_per_token") for r in s.runs["summary"]).mean
        m = data.metrics_of(ids, ["train/loss", "val/loss"])
        if m.empty:
            continue
        frames.append(
            pd.DataFrame(
                {
                    "variant": s.label,
                    "seed": m["run_id"].map(seeds),
                    "tokens": m["tokens"],
                    "elapsed_s": m["elapsed_s"],
                    "split": m["name"].map({"train/loss": "train", "val/loss": "held-out"}),
                    "step": m["step"],
                    "flops": m["tokens"] * per_token if per_token else float("nan"),
                    "loss": pd.to_numeric(m["value"], errors="coerce"),
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _curve_figures(
    data: StoreData, exp: str, sels: list[Selection], palette: figures.Palette, labels: dict[str, str]
) -> list[Figure]:
    """Per model size: the loss curves and the equal-budget views of its rows."""
    out = []
    models = dict.fromkeys(s.model_label for s in sels)
    for model in models:
        curves = _curves(data, [s for s in sels if s.model_label == model])
        if curves.empty:
            continue
        size = f" ({model})" if len(models) > 1 else ""
        fig = figures.loss_curves(curves, palette, labels, f"{exp}: loss curves{size}", f"{exp}-loss-{model}")
        out += [fig] if fig else []
        title = f"{exp}: equal-budget views{size}"
        fig = figures.equal_budget(curves, palette, labels, title, f"{exp}-budget-{model}")
        out += [fig] if fig else []
    return out


def train_sections(data: StoreData, palette: figures.Palette) -> list[Section]:
    runs = data.runs_of("train")
    if runs.empty:
        return []  # the suite has no such experiment: no section, none in the contents
    labels = variant_labels(data)
    sections = []
    for exp in dict.fromkeys(runs["experiment"]):
        sels = select(runs[runs["experiment"] == exp])
        chosen = choice_text(runs[runs["experiment"] == exp], protocol_of(sels[0]))
        rows_palette = figures.row_palette(palette, {s.label: s.variant for s in sels})
        row_labels = {s.label: labels.get(s.variant, s.variant).replace(s.variant, s.label, 1) for s in sels}
        pairs = [_row(data, s) for s in sels]
        raw = pd.DataFrame([p[0] for p in pairs])
        main = Table(
            f"{exp}-variants",
            f"{exp}: each variant at equal budget",
            raw,
            pd.DataFrame([p[1] for p in pairs]).fillna(MISSING),
        )
        cost = Table(
            f"{exp}-cost",
            f"{exp}: facts and budget consumed (mean over the chosen point's runs)",
            raw[["variant", "variant_options", "model", *_COST]],
            pd.DataFrame([p[2] for p in pairs]),
        )
        section = Section(
            f"Training: {exp}",
            intro=f"{INTRO} Here the point is chosen by {chosen}.",
            tables=[main, cost],
        )
        note = next((n for s in sels if (n := floor_note(s, "val")) is not None), None)
        if note:  # the null levels beside the held-out values (the same data for every row)
            section.notes.append(note)
        grid = _grid_table(exp, sels)
        if grid is not None:
            section.tables.append(grid)
        section.figures += _curve_figures(data, exp, sels, rows_palette, row_labels)
        scores = task_rows(data, sels)
        if not scores.empty:
            tables, figs = task_section(exp, scores, rows_palette)
            section.tables += tables
            section.figures += figs
        if any(is_number(s.get("resumed_from_step")) for s in runs["summary"]):
            section.notes.append("Some runs resumed from a saved training state (summary resumed_from_step).")
        sections.append(section)
    return sections
