"""The report's opening answer: each variant against the baseline on the test split, at
its own chosen grid point (chosen on validation loss only), paired by seed; then the
speedup pivot (variant x T, the baseline's time over the variant's)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from attnbench.decision_words import BASELINE
from attnbench.report.decision import TEST_TEXT, UNDETERMINED, Decision, method_text
from attnbench.report.document import Section, Table
from attnbench.report.floors import STRONGER_ORDERS, text_floor, text_floors_text
from attnbench.report.gate import gate_text
from attnbench.report.grid import axis_name, edge_clause, edges_of
from attnbench.report.learned import LEARNED_TEST_TEXT
from attnbench.report.load import StoreData
from attnbench.report.paired import (
    baselines_of,
    eval_settings,
    learned_of,
    metric_of,
    no_interval,
    paired_decision,
    protocol_of,
    seed_values,
    setting_label,
    wants_interval,
)
from attnbench.report.ratios import (
    Rounds,
    noisy_counts,
    ratio_interval,
    ratio_text,
    speed_noisy,
    speed_rounds,
    speedup_at_longest,
)
from attnbench.report.replication import replication
from attnbench.report.selection import Selection, choice_text, select
from attnbench.report.values import (
    MISSING,
    bytes_text,
    fact_text,
    is_number,
    key_of,
    mean_ci,
    num,
    point_text,
)

DEFAULT_BASELINE = "softmax"
DECIMALS = 3  # differences of loss (nats) and of accuracy (fraction) alike


def _protocol(runs: pd.DataFrame) -> dict[str, Any]:
    for s in runs["summary"]:
        if isinstance(s.get("protocol"), dict):
            return s["protocol"]
    return {}


def _speed_text(
    ratio: tuple[float, float, float] | None, T: int | None, noisy: str | None = None, own: bool = False
) -> str:
    """'1.57x faster [1.49, 1.65] at T=1024' (the first screen's words and rounding), marked where
    either point's timing is flagged noisy; 'baseline at T=1024' for the baseline's own rows."""
    if ratio is None:
        return MISSING
    found = BASELINE if own else ratio_text(*ratio)
    return f"{found} at T={T}" + (f" ({noisy})" if noisy else "")


def _speed_columns(prefix: str, ratio: tuple[float, float, float] | None, T: int | None, noisy: str | None):
    """The raw columns of one mode's speedup: <prefix>_speedup (ratio of means), _lo, _hi, _T, _noisy."""
    return {
        f"{prefix}_speedup": ratio and ratio[0],
        f"{prefix}_speedup_lo": ratio and ratio[1],
        f"{prefix}_speedup_hi": ratio and ratio[2],
        f"{prefix}_T": T,
        f"{prefix}_noisy": bool(noisy) if ratio else None,
    }


def _noisy_at(noisy: dict[str, dict[int, str]], T: int | None, variant: str, baseline: str) -> str | None:
    """Why the variant's or the baseline's point at T is flagged noisy; None where neither is."""
    if T is None:
        return None
    mine, theirs = noisy.get(variant, {}).get(T), noisy.get(baseline, {}).get(T)
    found = [mine] if mine else []
    found += [f"{baseline}'s {theirs}"] if theirs and baseline != variant else []
    return "; ".join(found) or None


def _against(
    data: StoreData,
    sel: Selection,
    base: Selection | None,
    metric: str,
    margin: float | None,
    setting: dict[str, Any] | None,
) -> tuple[Decision, list[float]] | None:
    """``sel`` against one baseline's row (None: ``sel`` is that baseline)."""
    if base is sel:
        return None
    if base is None:  # the baseline did not run at this model size
        return Decision(UNDETERMINED, None, None, None, 0, margin), []
    return paired_decision(data, sel, base, metric, margin, setting)


def _vs_columns(name: str, found: tuple[Decision, list[float]] | None) -> dict[str, Any]:
    """The raw columns of one further baseline: vs_<name>_diff_mean, ..._decision."""
    d = found[0] if found else None
    return {
        f"vs_{name}_decision": BASELINE if d is None else d.outcome,
        f"vs_{name}_decision_text": BASELINE if d is None else d.text(decimals=DECIMALS),
        f"vs_{name}_diff_mean": d and d.mean,
        f"vs_{name}_diff_lo": d and d.lo,
        f"vs_{name}_diff_hi": d and d.hi,
        f"vs_{name}_n": d.n if d else None,
    }


Speedup = tuple[tuple[float, float, float] | None, int | None, str | None]  # ratio [interval], T, why noisy


def _speedup(
    speed: tuple[dict[str, dict[int, Rounds]], dict[str, dict[int, str]]], variant: str, baseline: str
) -> Speedup:
    """(ratio with its interval, T, why noisy) of one mode at the longest T both timed."""
    ratio, T = speedup_at_longest(speed[0], variant, baseline)
    return ratio, T, _noisy_at(speed[1], T, variant, baseline)


def _where_columns(exp: str, sel: Selection, setting: dict[str, Any] | None, edges: list[Any]) -> dict[str, Any]:
    """Which row a summary row is: experiment, setting, variant, model, its chosen point and its runs."""
    chosen = sel.chosen_run()
    return {
        "experiment": exp,
        "setting": setting_label(setting),
        "setting_options": json.dumps(setting) if setting else None,
        "variant": sel.label,
        "variant_options": key_of(sel.options),
        "model": sel.model_label,
        "chosen_point": point_text(sel.point),
        "grid_points": sel.n_points,
        "grid_edges": ", ".join(f"{axis_name(e.axis)} {e.side}" for e in edges),
        "grid_edge_text": edge_clause(edges),
        "key": None if chosen is None else chosen["cell_key"],
        "keys": " ".join(sel.keys()),
    }


def _learned_columns(sel: Selection, metric: str, value: Any, gained: Any, losses: list[float]) -> dict[str, Any]:
    """The row's value beside its null levels: learned or not, and (text) the stronger n-gram floors."""
    floors = text_floors_text(sel.runs["summary"], "test") if metric == "loss" else None
    stronger = {o: text_floor(sel.runs["summary"], o) if metric == "loss" else None for o in STRONGER_ORDERS}
    return {
        "value_mean": value.mean,
        "value_lo": value.lo,
        "value_hi": value.hi,
        "learned": gained.status,
        "learned_seeds": f"{gained.k} of {gained.n}",
        "floor": gained.floor and gained.floor.value,
        "floor_name": gained.floor and gained.floor.name,
        "floors": floors or (gained.floor.text() if gained.floor else None),
        # text: the Kneser-Ney trigram's and 4-gram's test loss on the model's targets, stronger nulls than the bigram
        **stronger,
        **{f"below_{o}": None if v is None else sum(x < v for x in losses) for o, v in stronger.items()},  # seeds
        "loss_seeds": len(losses),
    }


def _view(
    exp: str,
    setting: dict[str, Any] | None,
    sel: Selection,
    edges: list[Any],
    found: Mapping[str, tuple[Decision, list[float]] | None],
    raw: dict[str, Any],
    gained: Any,
    speeds: tuple[Speedup, Speedup],
) -> dict[str, Any]:
    """The summary row as a reader sees it (``raw``: the same row's values)."""
    margin, own = raw["margin"], sel.variant == raw["baseline"]
    return {
        "experiment": exp if setting is None else f"{exp} @ {setting_label(setting)}",
        "variant": sel.label,
        "chosen point (of grid)": f"{point_text(sel.point)} (of {sel.n_points}"
        + "".join(f"; {e.side} edge of {axis_name(e.axis)}" for e in edges)
        + ")",
        "metric (margin)": raw["metric"] + (f" (±{margin:g})" if margin else ""),
        **{
            f"Δ vs {name} [95% CI], n, decision": BASELINE if f is None else f[0].text(decimals=DECIMALS)
            for name, f in found.items()
        },
        "replication on fresh seeds": raw["replication_text"] or MISSING,
        "test loss": num(raw["test_loss_mean"]),
        "test accuracy": num(raw["test_accuracy"], 3),
        "null level (test)": raw["floors"] or MISSING,
        "learned at this budget": gained.seeds_text(),
        "train-step speedup": _speed_text(*speeds[0], own=own),
        "decode speedup / token": _speed_text(*speeds[1], own=own),
        "state size": fact_text(sel.runs["summary"], "state_elements", lambda v: bytes_text(4 * v)),
        "trust gate": raw["gate"],
        "flags": raw["flags"] or "none",
    }


def _row(
    data: StoreData,
    exp: str,
    sel: Selection,
    bases: dict[str, Selection | None],
    speed: dict[str, tuple[dict[str, dict[int, Rounds]], dict[str, dict[int, str]]]],
    noisy: dict[str, int],
    setting: dict[str, Any] | None = None,
) -> tuple[dict, dict]:
    """One decided comparison: ``sel`` against each baseline of ``bases`` (the leading one
    first) on the protocol's metric, overall or at one evaluation ``setting``."""
    protocol = protocol_of(sel)
    metric, margin = metric_of(protocol), protocol.get("margin")
    found = {name: _against(data, sel, base, metric, margin, setting) for name, base in bases.items()}
    if not wants_interval(protocol):  # interval: false: each row's per-seed differences and mean, no decision
        found = {name: f and (no_interval(f[1], margin), f[1]) for name, f in found.items()}
    baseline = next(iter(bases))
    d, diffs = found[baseline] or (Decision(BASELINE, None, None, None, 0, margin), [])
    fresh = replication(data, sel, bases[baseline], d, metric, margin, setting)
    losses = list(seed_values(data, sel, "loss", setting).values())
    loss = mean_ci(losses)
    acc = mean_ci(seed_values(data, sel, "accuracy", setting).values(), bounds=(0.0, 1.0))
    gained = learned_of(data, sel, metric, setting)
    train, dec = (_speedup(speed[mode], sel.variant, baseline) for mode in ("train_step", "decode"))
    states = [s.get("state_elements") for s in sel.runs["summary"] if is_number(s.get("state_elements"))]
    flags = [f"{st} seed(s)" for st in sorted(set(sel.runs["status"]) - {"done"})]
    if noisy.get(sel.variant):
        flags.append(f"{noisy[sel.variant]} noisy speed point(s)")
    edges = edges_of(sel)
    raw = {
        **_where_columns(exp, sel, setting, edges),
        "metric": metric,
        "margin": margin,
        "decision": d.outcome,
        "decision_text": d.text(decimals=DECIMALS),
        "exact_p": d.exact_p,
        "decision_why": d.why or None,
        # the decision on fresh seeds, per round: repeated, undetermined on fresh seeds, reversed, ...
        "replication": "; ".join(r.status for r in fresh) or None,
        "replication_text": "; ".join(r.text() for r in fresh) or None,
        **_learned_columns(sel, metric, acc if metric == "accuracy" else loss, gained, losses),
        "baseline": baseline,
        "diff_mean": d.mean,
        "diff_lo": d.lo,
        "diff_hi": d.hi,
        "n": d.n,
        "diffs_by_seed": ", ".join(f"{x:+.4f}" for x in diffs),
        "baselines": ", ".join(bases),
        **{k: v for name in list(bases)[1:] for k, v in _vs_columns(name, found[name]).items()},
        "test_loss_mean": loss.mean,
        "test_accuracy": acc.mean,
        **_speed_columns("train_step", *train),
        **_speed_columns("decode", *dec),
        "state_elements": states[0] if states else None,
        "gate": gate_text(sel.runs["provenance"]),
        "flags": "; ".join(flags),
    }
    return raw, _view(exp, setting, sel, edges, found, raw, gained, (train, dec))


def _baseline_rows(sels: list[Selection], names: list[str]) -> dict[str, dict[int, Selection]]:
    """Per baseline, its row per model size: the one with no differing options first."""
    out: dict[str, dict[int, Selection]] = {name: {} for name in names}
    for s in sels:
        if s.variant in out and (s.model not in out[s.variant] or s.label == s.variant):
            out[s.variant][s.model] = s
    return out


def summary_table(data: StoreData) -> Table | None:
    train = data.runs_of("train")
    speed = {mode: (speed_rounds(data, mode), speed_noisy(data, mode)) for mode in ("train_step", "decode")}
    noisy = noisy_counts(data)
    raws, views, baselines, margins, chosen = [], [], {}, set(), set()
    for exp in dict.fromkeys(train["experiment"]):
        runs = train[train["experiment"] == exp]
        if not any(is_number(s.get("test_loss")) for s in runs["summary"]):
            continue  # no test split: nothing to report against
        protocol = _protocol(runs)
        names = baselines_of(protocol, DEFAULT_BASELINE)
        baselines.update(dict.fromkeys(names))
        margins.add(
            f"{exp}: {metric_of(protocol)} ±{protocol['margin']:g}"
            if protocol.get("margin")
            else f"{exp}: no margin stated (no equivalence decision)"
        )
        chosen.add(f"{exp}: {choice_text(runs, protocol)}")
        sels = select(runs)
        bases = _baseline_rows(sels, names)
        rank = {id(b): i for i, name in enumerate(names) for b in bases[name].values()}
        for sel in sorted(sels, key=lambda s: (rank.get(id(s), len(names)), s.model, s.label)):
            settings = eval_settings(sel) if metric_of(protocol) == "accuracy" else []
            for setting in [None, *(settings if len(settings) > 1 else [])]:
                mine = {name: bases[name].get(sel.model) for name in names}
                raw, view = _row(data, exp, sel, mine, speed, noisy, setting)
                raws.append(raw)
                views.append(view)
    if not raws:
        return None
    note = (
        f"Each variant at its own chosen grid point, chosen on validation data ({'; '.join(sorted(chosen))}); the "
        f"numbers are on the test split, which took no part in that choice. Δ = variant - baseline "
        f"({' / '.join(baselines)}), one column per baseline, on the same seed (same batches in the same "
        f"order); decision: {method_text(data, TEST_TEXT)}; margins: {'; '.join(sorted(margins))}. Null level: "
        "the bigram's cross-entropy for text on the model's own targets (unigram / bigram / trigram / 4-gram "
        "shown), the best binding-free "
        "predictor for tasks (measured on the same examples); "
        f"{LEARNED_TEST_TEXT}, else no decision (not learned). Speedups: the (first) "
        "baseline's mean time over its timing rounds / the variant's, at the longest T both timed, with a 95% "
        "interval from the rounds (the estimator of the speedup pivot and the first screen), marked where a "
        "point's timing is flagged noisy. State size: fp32 "
        "recurrent state at the training length."
    )
    return Table(
        "summary",
        "Summary: each variant against the baseline (test split)",
        pd.DataFrame(raws),
        pd.DataFrame(views).fillna(MISSING),
        note,
    )


def _pivot_table(data: StoreData, baseline: str = DEFAULT_BASELINE) -> Table | None:
    rows, views = [], []
    for mode in ("forward", "train_step", "decode"):
        rounds = speed_rounds(data, mode)
        if baseline not in rounds:
            continue
        for variant in sorted(rounds):
            Ts = sorted(T for T in rounds[variant] if T in rounds[baseline])
            cis = {T: ratio_interval(rounds[baseline][T], rounds[variant][T]) for T in Ts}
            rows.append(
                {
                    "mode": mode,
                    "variant": variant,
                    **{f"T={T}": cis[T][0] for T in Ts},
                    **{f"T={T} lo": cis[T][1] for T in Ts},
                    **{f"T={T} hi": cis[T][2] for T in Ts},
                }
            )
            views.append(
                {
                    "mode": mode,
                    "variant": variant,
                    **{f"T={T}": f"{r:.2f}x [{lo:.2f}, {hi:.2f}]" for T, (r, lo, hi) in cis.items()},
                }
            )
    if not rows:
        return None
    view = pd.DataFrame(views).fillna(MISSING)
    return Table(
        "speedup-pivot",
        f"Speedup against {baseline} (its time / the variant's; > 1 is faster)",
        pd.DataFrame(rows),
        view,
        "Mean time over the timing rounds of each point; 95% interval from "
        "the rounds' spread (delta method on the log ratio).",
    )


def comparison_sections(data: StoreData) -> list[Section]:
    """The opening section (empty list when the store has neither test-split runs nor speed)."""
    tables = [t for t in (summary_table(data), _pivot_table(data)) if t is not None]
    if not tables:
        return []
    return [
        Section(
            "Summary: the comparison",
            intro=(
                "The answer first: each variant's difference from the baseline on held-out test data, with its "
                "interval and n, and its speed against the baseline. Details follow in the sections below."
            ),
            tables=tables,
        )
    ]
