"""The capability battery's report section: a profile per variant (best accuracy per task,
as bars), the battery score with its interval per tier, the per-setting table behind it,
and, where another suite of the same store ran another tier, how well the tiers' rankings
agree (Spearman). The numbers come from ``battery_score``."""

from __future__ import annotations

import dataclasses
import io

import pandas as pd
import seaborn as sns

from attnbench.decision_words import LEARNED_ON, NOT_LEARNED
from attnbench.errors import ReportError
from attnbench.plotting import plt
from attnbench.report.battery_score import Agreement, battery_cells, best_over_grid, scores, tier_agreement
from attnbench.report.document import Figure, Section, Table
from attnbench.report.figures import Palette, row_palette
from attnbench.report.headline import ANSWER
from attnbench.report.load import StoreData, load_store
from attnbench.report.values import num

INTRO = (
    "MAD's protocol (Poli et al. 2024): each task at each difficulty setting is trained at every point of a small "
    "learning-rate grid; per setting the point with the best validation accuracy is kept and its accuracy on answers "
    "reported (test split when the runs have one); the battery score is the mean of those best accuracies over "
    "every setting of every task. The interval is a 95% bootstrap over seeds and evaluation answers at the chosen "
    "points (not over the choice itself)."
)


def _other_tiers(data: StoreData, own: set[str]) -> pd.DataFrame:
    """Battery runs of the store's other suites whose tiers this suite did not run."""
    frames = []
    for suite in data.suites:
        if suite == data.suite:
            continue
        try:
            cells = battery_cells(load_store(data.path, suite))
        except ReportError:
            continue
        frames.append(cells[~cells["tier"].isin(own)])
    return pd.concat(frames) if frames else pd.DataFrame()


def _agreement_notes(found: list[Agreement], tiers: list[str]) -> list[str]:
    if len(tiers) < 2:
        return [
            f"Only one tier ({tiers[0]}) has run into this store, so there is no tier agreement to report: run the "
            "other tier (suites/battery.yaml is the CPU tier, suites/battery-gpu.yaml the full one) into the same "
            "store and make the report again."
        ]
    notes = []
    for a in found:
        if a.rho is None:
            notes.append(
                f"Tiers {a.tiers[0]} and {a.tiers[1]} share {a.n} variant(s) with distinct scores: too few to rank "
                "(Spearman needs at least 3)."
            )
            continue
        notes.append(
            f"Tier agreement {a.tiers[0]} vs {a.tiers[1]}: Spearman rho = {a.rho:.2f} over n = {a.n} variants "
            f"(exact permutation p = {a.p_value:.3f}). "
            "A high value means the cheaper tier ranks the variants as the full settings do; "
            "a low value means it does not: the cheaper tier's ranking is then not a proxy for the full tier's."
        )
    return notes


def _profile(best: pd.DataFrame, palette: Palette, tier: str) -> Figure:
    """Bars: per task, each variant's best accuracy averaged over the task's settings."""
    per_task = best.groupby(["task", "variant"], sort=False)["best"].mean().reset_index()
    variants = list(dict.fromkeys(per_task["variant"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * per_task["task"].nunique() + 0.25 * len(variants)), 4.2))
    sns.barplot(
        per_task,
        x="task",
        y="best",
        hue="variant",
        hue_order=variants,
        palette=row_palette(palette, {v: v for v in variants}),
        ax=ax,
    )
    ax.set(ylabel="best accuracy on answers", xlabel="", ylim=(0, 1.02), title=f"Capability profile, tier {tier}")
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return Figure(
        f"battery-profile-{tier}",
        f"Capability profile (tier {tier})",
        buf.getvalue(),
        "Per task, each variant's best-over-grid accuracy averaged over the task's difficulty settings.",
    )


def _score_table(table: pd.DataFrame) -> Table:
    view = pd.DataFrame(
        {
            "tier": table["tier"],
            "variant": table["variant"],
            "battery score": [num(v, 3) for v in table["score"]],
            "95% interval": [
                "—" if lo is None or pd.isna(lo) else f"[{lo:.3f}, {hi:.3f}]"
                for lo, hi in zip(table["ci_low"], table["ci_high"], strict=True)
            ],
            "settings": table["settings"],
            "tasks": table["tasks"],
            "split": table["split"],
        }
    )
    return Table("battery-scores", "Battery score per variant", table, view, "mean of best-over-grid accuracies")


def _settings_table(best: pd.DataFrame) -> Table:
    raw = best.drop(columns=["accs", "answers"])
    view = raw.assign(best=[num(v, 3) for v in raw["best"]], null=[num(v, 3) for v in raw["null"]])
    return Table(
        "battery-settings",
        "Best accuracy per task setting",
        raw,
        view,
        "chosen on validation accuracy; null: the task's measured null level on the same examples (the best "
        "predictor without the capability); learned: seeds beyond it (exact binomial test on the answers)",
    )


def unlearned_notes(best: pd.DataFrame, baseline: str = "softmax") -> list[str]:
    """One note per tier naming the settings where ``baseline`` did not learn on every seed: there
    the tier measures how fast a mechanism learns the task within its budget, not whether it can."""
    notes = []
    for tier, group in best[best["variant"] == baseline].groupby("tier", sort=False):
        split = LEARNED_ON.split("{", 1)[0]  # "learned on "
        missed = group[group["learned"].str.startswith((NOT_LEARNED, split))]  # unknown: no null stored
        if missed.empty:
            continue
        where = "; ".join(
            f"{r['setting']} ({num(r['best'], 3)} against null {num(r['null'], 3)}, {r['learned']})"
            for _, r in missed.iterrows()
        )
        notes.append(
            f"Tier {tier}: {baseline} did not learn {len(missed)} of {len(group)} settings at this budget: {where}. "
            "There the tier measures how fast a mechanism learns the task within its budget, not whether it can; "
            "a score there is not comparable with a tier at which the baseline learned."
        )
    return notes


def battery_sections(data: StoreData, palette: Palette) -> list[Section]:
    """The battery section of ``data``'s suite; none when the suite ran no battery."""
    own = battery_cells(data)
    if own.empty:
        return []
    tiers = list(dict.fromkeys(own["tier"]))
    cells = pd.concat([own, _other_tiers(data, set(tiers))], ignore_index=True)
    best = best_over_grid(cells)
    if best.empty:
        return [Section("Capability battery", missing="the battery's runs recorded no validation accuracy on answers")]
    table = scores(best).sort_values(["tier", "score"], ascending=[True, False], ignore_index=True)
    all_tiers = list(dict.fromkeys(cells["tier"]))
    figures = [_profile(best[best["tier"] == t], palette, t) for t in tiers if (best["tier"] == t).any()]
    return [
        Section(
            "Capability battery",
            intro=INTRO,
            tables=[_score_table(table), _settings_table(best[best["tier"].isin(tiers)])],
            figures=figures,
            notes=unlearned_notes(best[best["tier"].isin(tiers)]) + _agreement_notes(tier_agreement(table), all_tiers),
        )
    ]


def _variant_sentence(row: pd.Series, per_task: pd.DataFrame) -> str:
    tasks = per_task[(per_task["tier"] == row["tier"]) & (per_task["variant"] == row["variant"])]
    tasks = tasks.sort_values("best", ascending=False)
    interval = (
        "" if row["ci_low"] is None or pd.isna(row["ci_low"]) else f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    )
    strongest, weakest = tasks.iloc[0], tasks.iloc[-1]
    return (
        f"{row['variant']}: battery score {row['score']:.3f}{interval} over {row['settings']} settings of "
        f"{row['tasks']} tasks; strongest at {strongest['task']} ({strongest['best']:.2f}), weakest at "
        f"{weakest['task']} ({weakest['best']:.2f})"
    )


def battery_answer(data: StoreData, palette: Palette) -> Section | None:
    """The report's answer for a suite that is all battery (every train run tagged with a tier):
    each variant's battery score first, best first, with its profile; None for other suites, whose
    answer is the per-experiment comparison."""
    train = data.runs_of("train")
    if train.empty or not all("battery" in c for c in train["coords"]):
        return None
    best = best_over_grid(battery_cells(data))
    if best.empty:
        return None
    table = scores(best).sort_values(["tier", "score"], ascending=[True, False], ignore_index=True)
    per_task = best.groupby(["tier", "variant", "task"], sort=False)["best"].mean().reset_index()
    tiers = list(dict.fromkeys(table["tier"]))
    figures = [
        dataclasses.replace(_profile(best[best["tier"] == t], palette, t), slug=f"answer-battery-profile-{t}")
        for t in tiers
    ]
    return Section(
        ANSWER,
        intro=(
            f"Battery score per variant, best first (tier {', '.join(tiers)}): the mean over task settings of the "
            "best accuracy over the learning-rate grid, with its 95% bootstrap interval (see Capability battery)."
        ),
        notes=[_variant_sentence(r, per_task) for _, r in table.iterrows()],
        figures=figures,
    )
