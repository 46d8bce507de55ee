"""The section for `finetune` experiments: held-out accuracy (tasks) or loss (text) against
LoRA rank, one line per variant, each variant's full fine-tune as a dashed reference line,
and a table with trainable parameters per rank."""

from __future__ import annotations

import pandas as pd

from attnbench.report import figures
from attnbench.report.document import Figure, Section, Table
from attnbench.report.load import StoreData
from attnbench.report.values import mean_ci, num


def _rows(runs: pd.DataFrame) -> pd.DataFrame:
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


def _figure(frame: pd.DataFrame, metric: str, palette: figures.Palette, title: str, slug: str) -> Figure | None:
    lora = frame[(frame["method"] == "lora") & frame[metric].notna()]
    if lora.empty:
        return None
    fig, axes = figures._new(1, width=6.5)
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
    figures._ticks_at(ax, ranks)
    ylabel = "held-out accuracy on answers" if metric == "accuracy" else "held-out loss (nats/token)"
    ax.set(xlabel="LoRA rank", ylabel=ylabel, **({"ylim": (-0.02, 1.02)} if metric == "accuracy" else {}))
    figures._legend(ax)
    fig.suptitle(title)
    return Figure(
        slug,
        title,
        figures._png(fig),
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
    frame = _rows(runs)
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
    fig = _figure(frame, metric, palette, f"Fine-tuning: {metric} against LoRA rank", "finetune-rank")
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
