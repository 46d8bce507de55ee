"""The first screen's verdict table: one row per variant, one column per experiment (and the train
step's speed and the decode state), each cell the decision word first, then the difference from
the baseline with its 95% interval, the seeds, the exact p and the replication on fresh seeds;
or why nothing was decided. Built from the summary rows (report/comparison.py), so a cell and the
Summary table never say different things."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from attnbench.decision_words import BASELINE, NOT_COMPARED, UNDETERMINED, short_outcome
from attnbench.report.decision import BETTER, EQUIVALENT, WORSE
from attnbench.report.document import Table
from attnbench.report.ratios import ratio_interval, ratio_text
from attnbench.report.values import MISSING, bytes_text, is_number, seconds_text

OVERALL = "all test sets"
Rounds = dict[int, tuple[float, float, int]]


def _num(metric: str, v: Any) -> str:
    return MISSING if not is_number(v) else (f"{v:.2f}" if metric == "accuracy" else f"{v:.3f}")


def learned_seeds(row: pd.Series) -> tuple[int, int]:
    """(k, n): how many of a summary row's own seeds learned, of how many ('2 of 3' in learned_seeds)."""
    k, n = str(row.get("learned_seeds") or "0 of 0").split(" of ")
    return int(k), int(n)


def outcome_word(row: pd.Series) -> str:
    """A summary row's decision in a few words ('equivalent ±0.05', 'baseline not learned',
    'learned on 1 of 3 seeds'): attnbench.decision_words.short_outcome on its columns."""
    margin = float(row["margin"]) if is_number(row.get("margin")) else None
    return short_outcome(str(row["decision"]), margin, *learned_seeds(row))


def _interval(row: pd.Series) -> str:
    """'+0.114 [+0.055, +0.174], n 6' ('' where there is no difference to show)."""
    if not is_number(row.get("diff_mean")):
        return ""
    head = f"{row['diff_mean']:+.3f}"
    if is_number(row.get("diff_lo")) and is_number(row.get("diff_hi")):
        head += f" [{row['diff_lo']:+.3f}, {row['diff_hi']:+.3f}]"
    return f"{head}, n {int(row['n'])}" + (f", exact p {row['exact_p']:.3f}" if is_number(row.get("exact_p")) else "")


def decision_cell(row: pd.Series) -> str:
    """One experiment's cell for a variant: the word, the difference, why undecided, replication."""
    if row["decision"] == BASELINE:
        return f"{_num(row['metric'], row['value_mean'])}, {BASELINE}"
    word = outcome_word(row)
    if row["decision"] in NOT_COMPARED:  # the row's own seeds; named where the word is the baseline's
        who = f"{row['variant']} " if str(row["decision"]).startswith(BASELINE) else ""
        return f"{word} ({who}{row['learned_seeds']} beyond {row['floor_name']} {_num(row['metric'], row['floor'])})"
    cell = " ".join(x for x in (word, _interval(row)) if x)
    why = row.get("decision_why")
    if row["decision"] == UNDETERMINED and isinstance(why, str) and why:
        cell += f" ({why.split(':')[0]})"
    if row["decision"] in (BETTER, WORSE, EQUIVALENT) and isinstance(row.get("replication"), str):
        cell += f"; fresh seeds: {row['replication']}"
    return cell


def _settings_cell(rows: pd.DataFrame) -> str:
    """' · by num_kv_pairs 2 / 4 / 6: not learned / not learned / worse' for per-setting rows."""
    if rows.empty:
        return ""
    settings = [json.loads(o) for o in rows["setting_options"]]
    keys = list(dict.fromkeys(k for s in settings for k in s))
    labels = ["/".join(str(s.get(k)) for k in keys) for s in settings]
    found = [
        _num(r["metric"], r["value_mean"]) if r["decision"] == BASELINE else outcome_word(r) for _, r in rows.iterrows()
    ]  # the baseline's own values, the others' decisions
    return f" · by {'/'.join(keys)} {' / '.join(labels)}: {' / '.join(found)}"


def _speed_cell(variant: str, baseline: str, rounds: dict[str, Rounds], T: int | None) -> str:
    mine, theirs = rounds.get(variant, {}), rounds.get(baseline, {})
    if T is None or T not in mine or T not in theirs:
        return MISSING
    if variant == baseline:
        return f"{seconds_text(mine[T][0])} at T={T}"
    return f"{ratio_text(*ratio_interval(theirs[T], mine[T]))} at T={T}"


def verdict_table(rows: pd.DataFrame, rounds: dict[str, Rounds], state: dict[str, float], T: int | None) -> Table:
    """The verdict table of the summary ``rows`` (per variant and experiment, overall and per
    setting), with the train step's ratio at ``T`` and the decode state."""
    baseline = str(rows["baseline"].iloc[0])
    variants = list(dict.fromkeys([baseline, *rows["variant"]]))
    experiments = list(dict.fromkeys(rows["experiment"]))
    raw, view = [], []
    for v in variants:
        mine = rows[rows["variant"] == v]
        out_raw: dict[str, Any] = {"variant": v}
        out_view: dict[str, str] = {"variant": v}
        for exp in experiments:
            at = mine[mine["experiment"] == exp]
            head = at[at["setting"] == OVERALL]
            column = f"{exp} ({rows.loc[rows['experiment'] == exp, 'metric'].iloc[0]}, vs {baseline})"
            if head.empty:
                out_view[column], out_raw[f"{exp}_decision"] = MISSING, None
                continue
            r = head.iloc[0]
            out_view[column] = decision_cell(r) + _settings_cell(at[at["setting"] != OVERALL])
            out_raw |= {f"{exp}_decision": r["decision"], f"{exp}_diff": r["diff_mean"], f"{exp}_n": r["n"]}
            out_raw |= {f"{exp}_exact_p": r.get("exact_p"), f"{exp}_replication": r.get("replication")}
        speed = _speed_cell(v, baseline, rounds, T)
        state_text = bytes_text(state[v]) if is_number(state.get(v)) else MISSING
        out_view |= {"train step" + (f" (T={T})" if T else ""): speed, "state": state_text}
        out_raw |= {"train_step": speed, "state_bytes": state.get(v)}
        raw.append(out_raw)
        view.append(out_view)
    note = (
        "Each cell: the decision against the baseline on the test split, Δ [95% interval], paired seeds, the exact "
        "sign-flip p, and the decision on fresh seeds (repeated, undetermined on fresh seeds, reversed; or not "
        "replicated: the rule reverses at most 2.5% of its decisions on fresh seeds, simulated under bimodal and "
        "skewed differences, and `attnbench replicate SUITE` checks them); or why nothing was decided."
    )
    return Table("verdict", "Verdict", pd.DataFrame(raw), pd.DataFrame(view), note)
