"""What trained checkpoints go on to: lm-eval task scores (each task's metric per variant, with
lm-eval's standard error, joined to the training run whose checkpoint was evaluated), and
fine-tuning with LoRA budgets (held-out accuracy for tasks, loss for text, against LoRA rank,
one line per variant with its full fine-tune as a dashed reference, and trainable parameters
per rank)."""

from __future__ import annotations

import pandas as pd

from attnbench import plotting
from attnbench.report import figures
from attnbench.report.document import Figure, Section, Table
from attnbench.report.figures import finish
from attnbench.report.load import StoreData
from attnbench.report.values import MISSING, mean_ci, num


def _lm_eval_rows(data: StoreData, runs: pd.DataFrame) -> list[dict]:
    """One row per stored lm-eval score of ``runs``, with the training run it evaluated."""
    by_key = {r["cell_key"]: r for _, r in data.runs.iterrows()}
    meta = runs.set_index("id")
    rows = []
    for _, r in data.results_of(runs["id"]).iterrows():
        t, run = r["tags"], meta.loc[r["run_id"]]
        trained = by_key.get(t.get("train_cell_key"))
        rows.append(
            {
                "variant": run["variant"],
                "seed": run["seed"],
                "task": t.get("task"),
                "metric": t.get("metric", r["name"]),
                "filter": t.get("filter"),
                "value": r["value"],
                "unit": r["unit"],
                "stderr": t.get("stderr"),
                "n_samples": t.get("n_samples"),
                "higher_is_better": t.get("higher_is_better"),
                "train_experiment": trained["experiment"] if trained is not None else None,
                "train_run_id": t.get("train_run_id"),
                "train_cell_key": t.get("train_cell_key"),
            }
        )
    return rows


def _lm_eval_table(exp: str, rows: list[dict]) -> Table:
    frame = pd.DataFrame(rows).sort_values(["task", "metric", "variant", "seed"], kind="stable")
    view = pd.DataFrame(
        {
            "task": frame["task"],
            "metric": frame["metric"],
            "variant": frame["variant"],
            "seed": frame["seed"],
            "value": [f"{num(v)} {u}".strip() for v, u in zip(frame["value"], frame["unit"], strict=True)],
            "stderr": [num(v, 2) for v in frame["stderr"]],
            "better": frame["higher_is_better"].map({True: "higher", False: "lower"}).fillna(MISSING),
            "samples": [num(v) for v in frame["n_samples"]],
            "trained in": [
                f"{e} (run {num(i)})" if e else MISSING
                for e, i in zip(frame["train_experiment"], frame["train_run_id"], strict=True)
            ],
        }
    )
    return Table(f"{exp}-lm-eval", f"{exp}: lm-eval scores", frame, view)


def lm_eval_sections(data: StoreData) -> list[Section]:
    runs = data.runs_of("lm_eval")
    sections = []
    for exp in dict.fromkeys(runs["experiment"]):  # none: no section, none in the contents
        exp_runs = runs[runs["experiment"] == exp]
        rows = _lm_eval_rows(data, exp_runs)
        section = Section(
            f"Downstream (lm-eval): {exp}",
            intro=(
                "lm-eval task scores of each trained checkpoint; stderr as lm-eval reports it (bootstrap or analytic)."
            ),
        )
        for _, r in exp_runs[exp_runs["status"] != "done"].iterrows():
            section.notes.append(f"{r['variant']} (seed {r['seed']}): {r['status']}: {r['error'] or 'no detail'}")
        if rows:
            section.tables.append(_lm_eval_table(exp, rows))
        else:
            section.missing = f"experiment {exp!r} stored no lm-eval scores"
        sections.append(section)
    return sections


def _finetune_rows(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, r in runs[runs["status"] == "done"].iterrows():
        s = r["summary"]
        rows.append(
            {
                "experiment": r["experiment"],
                "from_experiment": r["coords"].get("from_experiment"),
                "variant": r["variant"],
                "seed": r["seed"],
                "method": s.get("method"),
                "rank": s.get("rank"),
                "from_scratch": bool(s.get("from_scratch")),
                "trainable_params": s.get("trainable_params"),
                "total_params": s.get("total_params"),
                "accuracy": s.get("val_accuracy"),
                "loss": s.get("val_loss"),
                "train_time_s": s.get("train_time_s"),
                "unseen": tuple(s.get("unseen_answer_tokens") or ()),
            }
        )
    return pd.DataFrame(rows)


def _rank_figure(frame: pd.DataFrame, metric: str, palette: figures.Palette, title: str, slug: str) -> Figure | None:
    lora = frame[(frame["method"] == "lora") & frame[metric].notna()]
    if lora.empty:
        return None
    fig, axes = plotting.panels(1, 1, (6.5, 4.2))
    ax = axes[0]
    for variant in sorted(frame["variant"].unique()):
        pts = lora[lora["variant"] == variant].groupby("rank")[metric].mean()
        colour = palette.get(variant, (0.3, 0.3, 0.3))
        ax.plot(pts.index, pts.values, marker="o", color=colour, label=variant)
        full = frame[(frame["variant"] == variant) & (frame["method"] == "full")][metric].dropna()
        if not full.empty:
            ax.axhline(full.mean(), color=colour, linestyle="--", linewidth=1)
    ranks = sorted(lora["rank"].unique())
    if len(ranks) > 1:
        ax.set_xscale("log", base=2)
    plotting.ticks_at(ax, ranks)
    ylabel = "held-out accuracy on answers" if metric == "accuracy" else "held-out loss (nats/token)"
    ax.set(xlabel="LoRA rank", ylabel=ylabel, **({"ylim": (-0.02, 1.02)} if metric == "accuracy" else {}))
    plotting.legend(ax)
    return finish(
        fig,
        slug,
        title,
        "Solid: LoRA at each rank (mean over seeds); "
        "dashed: the same variant fine-tuned with every weight, same data and steps.",
    )


def _unseen_notes(frame: pd.DataFrame) -> list[str]:
    """LoRA experiments scored on tokens their base models barely saw (finetune/vocab.py)."""
    notes = []
    lora = frame[(frame["method"] == "lora") & frame["unseen"].map(bool)]
    for experiment, group in lora.groupby("experiment"):
        ids = sorted({i for u in group["unseen"] for i in u})
        shown = ", ".join(map(str, ids[:12])) + (" ..." if len(ids) > 12 else "")
        notes.append(
            f"{experiment}: the answers include {len(ids)} token ids ({shown}) that make up under "
            f"1e-5 of the base models' training tokens; with the tied embedding frozen, LoRA cannot "
            f"learn to emit them, so its accuracy here says little about the variants: pretrain on "
            f"data that has them (variants: {', '.join(sorted(group['variant'].unique()))})"
        )
    return notes


def finetune_sections(data: StoreData, palette: figures.Palette) -> list[Section]:
    runs = data.runs_of("finetune")
    if runs.empty:
        return []  # the suite has no such experiment: no section, none in the contents
    frame = _finetune_rows(runs)
    section = Section(
        "Fine-tuning (LoRA budgets)",
        intro=(
            "Checkpoints of each variant tuned to new data with PEFT LoRA adapters at each rank (only the "
            "adapters train) and with every weight (full); trainable parameters as counted after PEFT."
        ),
    )
    for _, r in runs[runs["status"] != "done"].iterrows():
        section.notes.append(
            f"{r['experiment']}/{r['variant']} (seed {r['seed']}): {r['status']}: {r['error'] or 'no detail'}"
        )
    if frame.empty:
        section.missing = "no finetune run finished"
        return [section]
    section.notes += _unseen_notes(frame)
    metric = "accuracy" if frame["accuracy"].notna().any() else "loss"
    fig = _rank_figure(frame, metric, palette, f"Fine-tuning: {metric} against LoRA rank", "finetune-rank")
    if fig is not None:
        section.figures.append(fig)
    groups = frame.groupby(["variant", "method", "rank", "from_scratch"], dropna=False, sort=True)
    table = pd.DataFrame(
        [
            {
                "variant": v,
                "method": m,
                "rank": rk,
                "from_scratch": fs,
                "trainable_params": g["trainable_params"].iloc[0],
                "total_params": g["total_params"].iloc[0],
                **{m: mean_ci(g[m]).mean for m in dict.fromkeys((metric, "loss"))},
                "seeds": len(g),
                "train_time_s": mean_ci(g["train_time_s"]).mean,
            }
            for (v, m, rk, fs), g in groups
        ]
    )
    shown = ("rank", "trainable_params", "total_params", *dict.fromkeys((metric, "loss")), "train_time_s")
    view = table.assign(**{c: [num(x) for x in table[c]] for c in shown})
    section.tables.append(Table("finetune", "Fine-tuning: trainable parameters and held-out result", table, view))
    return [section]
