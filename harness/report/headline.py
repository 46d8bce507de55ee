"""The report's first screen: one sentence per variant saying what this run found against the
baseline (each experiment's decision, per evaluation setting where the metric is task accuracy,
the train-step speed ratio at up to three lengths, the state size, and what its budget's numbers
mean: decided at final quality, or not learned), and the quality-against-cost picture."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from attnbench.decision_words import (
    BASELINE,
    BELOW_NGRAM,
    DIVERGED_NO_SEED,
    FAILED_NO_SEED,
    NOT_LEARNED_AT_BUDGET,
    budget_words,
    own_words,
)
from attnbench.report.comparison import summary_table
from attnbench.report.decision import TEST_TEXT, method_text
from attnbench.report.document import Section
from attnbench.report.figures import Palette
from attnbench.report.floors import STRONGER_ORDERS
from attnbench.report.learned import LEARNED, LEARNED_TEST_TEXT, NOT_LEARNED, SPLIT
from attnbench.report.load import StoreData
from attnbench.report.paired import NO_INTERVAL, NO_INTERVAL_TEXT
from attnbench.report.ratios import path_flags, ratio_interval, ratio_text, speed_noisy, speed_rounds
from attnbench.report.time_to_learn import undecided_clauses
from attnbench.report.tradeoff import tradeoff_figure
from attnbench.report.values import MISSING, bytes_text, is_number, seconds_text
from attnbench.report.verdict import learned_seeds, outcome_word, verdict_table

ANSWER = "The answer"
NO_TRAIN_STEP = (
    "No train-step speed here: the ratios and the time panel come from a `kind: speed` experiment, and this "
    "suite has none that timed a train step (add one, e.g. suites/quick.yaml's `speed`)."
)
Rounds = dict[int, tuple[float, float, int]]


def speed_lengths(lengths: set[int] | list[int]) -> list[int]:
    """At most three lengths to quote: all of them, or the shortest, a middle one and the longest."""
    Ts = sorted(lengths)
    return Ts if len(Ts) <= 3 else [Ts[0], Ts[len(Ts) // 2], Ts[-1]]


def short_labels(settings: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """("n_pairs", ["4", "6", "7"]): the fewest leading keys that tell the settings apart."""
    keys = list(dict.fromkeys(k for s in settings for k in s))
    for n in range(1, len(keys) + 1):
        labels = ["/".join(str(s.get(k, MISSING)) for k in keys[:n]) for s in settings]
        if len(set(labels)) == len(labels):
            return "/".join(keys[:n]), labels
    return "/".join(keys), ["/".join(str(s.get(k, MISSING)) for k in keys) for s in settings]


def _value(metric: str, v: Any) -> str:
    return MISSING if not is_number(v) else (f"{v:.2f}" if metric == "accuracy" else f"{v:.3f}")


def budget_meaning(rows: pd.DataFrame) -> str:
    """What a variant's numbers in one experiment are at this budget ('decided at final accuracy',
    'not learned at this budget', ...): attnbench.decision_words.budget_words on its rows."""
    if (rows["decision"] == NO_INTERVAL).all():
        return NO_INTERVAL_TEXT
    states = [str(s) for s in rows["learned"]] if "learned" in rows else []
    return budget_words(str(rows["metric"].iloc[0]), [str(d) for d in rows["decision"]], states)


def _learned_text(row: pd.Series) -> str:
    """' [learned: beyond bigram 2.496; below the trigram (2.098) on 2 of 3 seeds]', ' [not learned at
    this budget: null 0.18]' or ' [learned on 1 of 3 seeds: null 0.38]'."""
    if not is_number(row.get("floor")):
        return ""
    floor = f"{row['floor_name']} {_value(row['metric'], row['floor'])}"
    status = row["learned"]
    head = {LEARNED: f"{LEARNED}: beyond ", NOT_LEARNED: f"{NOT_LEARNED_AT_BUDGET}: "}.get(status, "")
    if status == SPLIT:
        head = f"{own_words(SPLIT, *learned_seeds(row))}: "
    return f" [{head}{floor}{trigram_clause(row)}]"


def _by_setting(rows: pd.DataFrame) -> str:
    """' by n_pairs 4 / 6 / 7: -0.01 equivalent ±0.05 / -0.26 worse / -0.54 worse' ('' without settings)."""
    if rows.empty:
        return ""
    keys, labels = short_labels([json.loads(o) for o in rows["setting_options"]])
    found = [
        f"{d:+.2f} {outcome_word(r)}" if is_number(d) else outcome_word(r)
        for d, (_, r) in zip(rows["diff_mean"], rows.iterrows(), strict=True)
    ]
    return f"; by {keys} {' / '.join(labels)}: {' / '.join(found)}"


def further_baselines(row: pd.Series) -> list[str]:
    """The baselines of a summary row after the leading one."""
    names = row.get("baselines")
    return str(names).split(", ")[1:] if isinstance(names, str) else []


def _further(row: pd.Series) -> str:
    """'; vs linear -0.12 [...], n=3, better' per further baseline the row is not itself."""
    return "".join(
        f"; vs {b} {row[f'vs_{b}_decision_text']}"
        for b in further_baselines(row)
        if row.get(f"vs_{b}_decision") != BASELINE
    )


def _unquoted(T: int, noisy: dict[str, dict[int, str]], *variants: str) -> str | None:
    """'not quoted at T=1024 (noisy timing: ...)' where the point at T of any of ``variants`` is
    flagged noisy; None where none is."""
    why = [noisy[v][T] if v == variants[0] else f"{v}'s {noisy[v][T]}" for v in variants if T in noisy.get(v, {})]
    return f"not quoted at T={T} ({'; '.join(why)})" if why else None


def _speed(
    variant: str,
    baseline: str,
    rounds: dict[str, Rounds],
    paths: dict[str, dict[int, str]],
    noisy: dict[str, dict[int, str]] | None = None,
) -> str:
    """'train step 2.4x slower [2.0, 2.9] at T=256 (fallback path), not quoted at T=1024 (noisy
    timing: ...)': a point whose stored timing is flagged noisy is named, not quoted."""
    mine, theirs = rounds.get(variant, {}), rounds.get(baseline, {})
    parts = []
    for T in speed_lengths(set(mine) & set(theirs)):
        skip = _unquoted(T, noisy or {}, variant, baseline)
        if skip:
            parts.append(skip)
            continue
        flag = paths.get(variant, {}).get(T)
        parts.append(f"{ratio_text(*ratio_interval(theirs[T], mine[T]))} at T={T}" + (f" ({flag})" if flag else ""))
    return "train step " + ", ".join(parts) if parts else ""


def _replicated(row: pd.Series) -> str:
    """'; repeated (seeds 6-11: ...)' for a decided row: its decision on fresh seeds."""
    text = row.get("replication_text")
    return f"; {text}" if isinstance(text, str) and text else ""


def _edge(row: pd.Series, lead: str = "; ") -> str:
    """The grid-edge clause of a summary row ('lr at the grid's upper edge: widen it'), led by ``lead``."""
    text = row.get("grid_edge_text")
    return f"{lead}{text}" if isinstance(text, str) and text else ""


def trigram_clause(row: pd.Series) -> str:
    """'; below the trigram (1.947) on 0 of 6 seeds, below the 4gram (1.651) on 0 of 6 seeds' for a
    text row: where the model stands against the Kneser-Ney trigram and 4-gram on its own targets,
    stronger nulls than the bigram ('' without them)."""
    if not row.get("loss_seeds"):
        return ""
    n = int(row["loss_seeds"])
    parts = [
        BELOW_NGRAM.format(order=o, value=f"{row[o]:.3f}", k=int(row[f"below_{o}"]), n=n)
        for o in STRONGER_ORDERS
        if is_number(row.get(o)) and is_number(row.get(f"below_{o}"))
    ]
    return "; " + ", ".join(parts) if parts else ""


SEE_PROBLEMS = "see Problems"  # the renderers link it to the Problems list


def failed_clause(row: pd.Series) -> str | None:
    """'failed: no seed finished (seeds failed, oom; see Problems)' for a summary row none of whose
    seeds finished (its flags name their statuses); None for a row with a finished seed."""
    flags = str(row.get("flags") or "").split("; ")
    statuses = [f.removesuffix(" seed(s)") for f in flags if f.endswith(" seed(s)")]
    if not statuses or is_number(row.get("value_mean")) or is_number(row.get("loss_seeds")) and row["loss_seeds"]:
        return None
    word = DIVERGED_NO_SEED if set(statuses) == {"diverged"} else FAILED_NO_SEED
    return f"{word} (seeds {', '.join(statuses)}; {SEE_PROBLEMS})"


def sentence(
    variant: str,
    table: pd.DataFrame,
    rounds: dict[str, Rounds],
    state: dict[str, float],
    paths: dict[str, dict[int, str]] | None = None,
    noisy: dict[str, dict[int, str]] | None = None,
) -> str:
    """What this run found for ``variant``: every experiment's value with its difference from the
    baseline and decision (for task accuracy, also per evaluation setting), speed ratio and state."""
    mine = table[table["variant"] == variant]
    parts = []
    for exp in dict.fromkeys(mine["experiment"]):
        rows = mine[mine["experiment"] == exp]
        head = rows[rows["setting"] == "all test sets"].iloc[0]
        failed = failed_clause(head)
        if failed:  # no seed to compare: what happened, and where it is listed
            parts.append(f"{exp} {failed}")
            continue
        parts.append(
            f"{exp} {head['metric']} {_value(head['metric'], head['value_mean'])} ({head['decision_text']}"
            f"{_replicated(head)}{_further(head)}{_edge(head)})"
            + _by_setting(rows[rows["setting"] != "all test sets"])
            + f" [{budget_meaning(rows)}{trigram_clause(head)}]"
        )
    speed = _speed(variant, mine["baseline"].iloc[0], rounds, paths or {}, noisy)
    if speed:
        parts.append(speed)
    if is_number(state.get(variant)):
        parts.append(f"state {bytes_text(state[variant])}")
    return f"{variant}: " + "; ".join(parts)


def baseline_sentence(
    baseline: str,
    table: pd.DataFrame,
    rounds: dict[str, Rounds],
    state: dict[str, float],
    noisy: dict[str, dict[int, str]] | None = None,
) -> str:
    """The baseline's own values, which every other sentence is measured against."""
    mine = table[(table["variant"] == baseline) & (table["baseline"] == baseline)]
    parts = []
    for exp in dict.fromkeys(mine["experiment"]):
        rows = mine[mine["experiment"] == exp]
        metric = rows["metric"].iloc[0]
        head = rows[rows["setting"] == "all test sets"].iloc[0]
        edge = _edge(head, lead="")
        part = f"{exp} {metric} {_value(metric, head['value_mean'])}" + (f" ({edge})" if edge else "")
        settings = rows[rows["setting"] != "all test sets"]
        if not settings.empty:
            keys, labels = short_labels([json.loads(o) for o in settings["setting_options"]])
            part += f", by {keys} {' / '.join(labels)}: {' / '.join(_value(metric, v) for v in settings['value_mean'])}"
            if all(is_number(f) for f in settings["floor"]):
                part += (
                    f" ({settings['floor_name'].iloc[0]} {' / '.join(_value(metric, f) for f in settings['floor'])})"
                )
        parts.append(part + _learned_text(head))
    times = rounds.get(baseline, {})
    if times:
        quoted = speed_lengths(set(times))
        parts.append(
            "train step "
            + ", ".join(_unquoted(T, noisy or {}, baseline) or f"{seconds_text(times[T][0])} at T={T}" for T in quoted)
        )
    if is_number(state.get(baseline)):
        parts.append(f"state {bytes_text(state[baseline])}")
    return f"{baseline} (baseline): " + "; ".join(parts)


def headline_section(data: StoreData, palette: Palette) -> Section | None:
    """None when the store has no decided comparison (no protocol experiment with a test split)."""
    table = summary_table(data)
    if table is None:
        return None
    rows = table.data
    variants = list(dict.fromkeys(rows["variant"]))
    rounds = speed_rounds(data, "train_step")
    timed = [set(rounds[v]) for v in variants if v in rounds]  # variants never timed get no cost point
    shared = set.intersection(*timed) if timed else set()
    T = max(shared) if shared else None
    state: dict[str, float] = {}  # at the first experiment's training length
    for v, e in zip(rows["variant"], rows["state_elements"], strict=True):
        if is_number(e):
            state.setdefault(v, 4.0 * float(e))
    baselines = list(dict.fromkeys(rows["baseline"]))
    further = list(dict.fromkeys(b for _, r in rows.iterrows() for b in further_baselines(r)))
    noisy = speed_noisy(data, "train_step")
    sentences = [baseline_sentence(b, rows, rounds, state, noisy) for b in baselines]
    paths = path_flags(data, "train_step")
    sentences += [
        sentence(v, rows, rounds, state, paths, noisy)
        for v in variants
        if not (rows.loc[rows["variant"] == v, "decision"] == BASELINE).all()
    ]
    sentences += undecided_clauses(data, rows[rows["setting"] == "all test sets"])  # the second question
    overall = rows[rows["setting"] == "all test sets"].copy()
    overall["step_time_s"] = [rounds[v][T][0] if T is not None and v in rounds else None for v in overall["variant"]]
    overall["state_bytes"] = [state.get(v) for v in overall["variant"]]
    overall["unlearned"] = [status == NOT_LEARNED for status in overall["learned"]]
    figure = tradeoff_figure(overall, palette, T)
    margins = ", ".join(
        f"{e} {m} ±{g:g}" if is_number(g) else f"{e} {m}: none stated"
        for e, m, g in dict.fromkeys(zip(overall["experiment"], overall["metric"], overall["margin"], strict=True))
    )
    also = "".join(f"; then vs {b}" for b in further)
    return Section(
        ANSWER,
        intro=(
            f"Each variant against {' / '.join(baselines)} on the test split at its own tuned rate: the verdict "
            "first, then each variant in words, then quality against cost (the method is folded below)."
        ),
        method=(
            f"Value (Δ vs {' / '.join(baselines)} [95% interval], seeds, decision{also}) and what the budget's "
            f"numbers mean. Decision: {method_text(data, TEST_TEXT)}; margins: {margins}; none where the baseline "
            f"or the variant has not learned ({LEARNED_TEST_TEXT}: the bigram's cross-entropy on the model's own "
            "targets for text, the best binding-free predictor for tasks). A decided row is trained again on fresh "
            "seeds where the protocol replicates (protocol.replicate; attnbench replicate), and marked repeated, "
            "undetermined on fresh seeds, not repeated or reversed. "
            "Train step: how much faster or slower than the baseline (the ratio of mean times over the timing "
            "rounds, as in the Summary and the speedup pivot, which give the raw ratio), 95% interval from the "
            "rounds; a point whose timing the speed run flagged noisy is named, not quoted."
            + ("" if rounds else f" {NO_TRAIN_STEP}")
        ),
        tables=[verdict_table(rows, rounds, state, T)],
        notes=sentences,
        figures=[figure] if figure else [],
    )
