"""The report's first screen: one sentence per variant saying what this run found against the
baseline (each experiment's decision, speed and state), and the quality-against-cost picture."""

from __future__ import annotations

import pandas as pd

from attnbench.report.comparison import ratio_interval, speed_rounds, summary_table
from attnbench.report.document import Section
from attnbench.report.figures import Palette
from attnbench.report.load import StoreData
from attnbench.report.tradeoff import tradeoff_figure
from attnbench.report.values import bytes_text, is_number

ANSWER = "The answer"


def _common_T(times: dict[str, dict[int, tuple]], variants: list[str]) -> int | None:
    shared = set.intersection(*(set(times.get(v, {})) for v in variants)) if variants else set()
    return max(shared) if shared else None


def _value(row: pd.Series) -> str:
    v = row["value_mean"]
    return "—" if not is_number(v) else (f"{v:.2f}" if row["metric"] == "accuracy" else f"{v:.3f}")


def _sentence(variant: str, rows: pd.DataFrame, base_rows: pd.DataFrame, step: dict[str, tuple], T: int | None,
              state: dict[str, float]) -> str:
    parts = []
    for _, r in rows.iterrows():
        base = base_rows[base_rows["experiment"] == r["experiment"]]
        bval = _value(base.iloc[0]) if not base.empty else "—"
        unit = "accuracy" if r["metric"] == "accuracy" else "loss"
        parts.append(f"{r['experiment']} {unit} {_value(r)} vs {r['baseline']} {bval} ({r['decision_text']})")
    baseline = rows["baseline"].iloc[0]
    if T is not None and variant in step and baseline in step:
        x, lo, hi = ratio_interval(step[baseline], step[variant])
        parts.append(f"train step {x:.2f}x [{lo:.2f}, {hi:.2f}] the speed of {baseline} at T={T}")
    if is_number(state.get(variant)) and is_number(state.get(baseline)):
        parts.append(f"state {bytes_text(state[variant])} vs {bytes_text(state[baseline])}")
    return f"{variant}: " + "; ".join(parts)


def headline_section(data: StoreData, palette: Palette) -> Section | None:
    """None when the store has no decided comparison (no protocol experiment with a test split)."""
    table = summary_table(data)
    if table is None:
        return None
    rows = table.data[table.data["setting"] == "all test sets"].copy()
    variants = list(dict.fromkeys(rows["variant"]))
    rounds = speed_rounds(data, "train_step")
    T = _common_T(rounds, variants)
    step = {v: rounds[v][T] for v in variants if T is not None and v in rounds}
    state: dict[str, float] = {}  # at the first experiment's training length
    for v, e in zip(rows["variant"], rows["state_elements"]):
        if is_number(e):
            state.setdefault(v, 4.0 * float(e))
    rows["step_time_s"] = [step[v][0] if v in step else None for v in rows["variant"]]
    rows["state_bytes"] = [state.get(v) for v in rows["variant"]]
    sentences = []
    for v in variants:
        mine = rows[rows["variant"] == v]
        if (mine["decision"] == "baseline").all():
            continue
        sentences.append(_sentence(v, mine, rows[rows["variant"] == mine["baseline"].iloc[0]], step, T, state))
    figure = tradeoff_figure(rows, palette)
    return Section(ANSWER, intro=("What this run found, per variant against the baseline on the test split: "
                                  "value vs baseline (Δ [95% interval], seeds, decision)."),
                   notes=sentences, figures=[figure] if figure else [])
