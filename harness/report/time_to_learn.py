"""Time to learn: from each run's stored validation curve, the steps, tokens and seconds until a
variant first reaches a target (task accuracy, default 0.9 of the ceiling 1.0; a loss for text,
``protocol.learn_target``). A seed that never reaches it is censored at its budget, never
dropped. Per variant: the Kaplan-Meier median over seeds with a Brookmeyer-Crowley interval;
against the baseline: the permutation log-rank test on steps, exact at these seed counts
(attnbench.stats.survival), or "cannot decide with n1 vs n2 seeds" where no outcome could reach 5%."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnbench.decision_words import (
    BASELINE,
    BETTER,
    CANNOT_DECIDE,
    DID_NOT_REACH,
    EQUIVALENT,
    FASTER,
    MEDIAN_NOT_REACHED,
    NEITHER_REACHED,
    NO_DIFFERENCE,
    NO_FINAL_DECISION,
    NOT_REACHED,
    SLOWER,
    WORSE,
)
from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.paired import baselines_of, metric_of, protocol_of
from attnbench.report.selection import Selection, select
from attnbench.report.values import MISSING, is_number
from attnbench.stats.survival import ALPHA, EXACT_LIMIT, MONTE_CARLO, LogRank, Median, log_rank, median_time

DEFAULT_ACCURACY_TARGET = 0.9  # of the task's ceiling, accuracy 1.0
UNITS = ("steps", "tokens", "seconds")
_COLUMN = {"steps": "step", "tokens": "tokens", "seconds": "elapsed_s"}
METHOD = (
    "a seed's time is the first validation evaluation at or past the target (so it is known to the "
    "evaluation interval); a seed that never reaches it is censored at its budget. Median over seeds: "
    "Kaplan-Meier, with a Brookmeyer-Crowley 95% interval (Greenwood variance, linear scale); against the "
    "baseline: the log-rank statistic (Mantel) on steps with its exact permutation p (every re-assignment of "
    f"the pooled seeds to the two arms while there are at most {EXACT_LIMIT:,}, else {MONTE_CARLO:,} random ones, "
    f"(b + 1) / (m + 1)), two-sided, at {ALPHA:g}; no chi-squared p is used at any seed count. Where even the "
    "most extreme re-assignment's p exceeds 5% (3 vs 3 seeds: 2/20 = 0.1), the row says it cannot decide"
)


def amount(unit: str, x: float | None) -> str:
    """A time in ``unit`` as the table shows it: whole steps and tokens, seconds to 3 digits."""
    if x is None:
        return NOT_REACHED
    return f"{x:.3g}" if unit == "seconds" else f"{x:.0f}"


@dataclass(frozen=True)
class Row:
    """One variant's times to the target, in each unit, over its chosen point's seeds."""

    sel: Selection
    metric: str
    target: float
    times: dict[str, list[float]]  # unit -> per seed: the time it reached the target, or its budget
    reached: list[bool]
    medians: dict[str, Median]
    versus: LogRank | None = None
    baseline: str | None = None  # None: this row is the baseline

    def target_text(self) -> str:
        return f"{self.target:g} {'accuracy' if self.metric == 'accuracy' else 'loss'}"

    def reached_text(self) -> str:
        """'1 of 3 seeds': the row's one statement of how many seeds reached the target (the
        others are censored at their budget)."""
        return f"{sum(self.reached)} of {len(self.reached)} seeds"

    def time_text(self, unit: str = "steps") -> str:
        """'800 [600, 1000]'; 'did not reach 0.9 accuracy in 3000 steps' (no seed reached it);
        'median not reached in 3000 steps' (some did, fewer than half). How many seeds reached
        it is ``reached_text``, said once."""
        m = self.medians[unit]
        if m.median is None:
            budget = amount(unit, max(self.times[unit]) if self.times[unit] else None)
            if m.events == 0:
                return DID_NOT_REACH.format(target=self.target_text(), budget=budget, unit=unit)
            return MEDIAN_NOT_REACHED.format(budget=budget, unit=unit)
        lo = MISSING if m.lo is None else amount(unit, m.lo)
        return f"{amount(unit, m.median)} [{lo}, {amount(unit, m.hi)}]"

    def versus_text(self) -> str:
        """'exact permutation log-rank p=0.0022: faster than softmax', or 'cannot decide with 3 vs 3
        seeds (...)' where no outcome at these seeds could reach 5% (no p is given as evidence)."""
        if self.baseline is None:
            return BASELINE
        if self.versus is None:
            return f"{NEITHER_REACHED} (vs {self.baseline})"
        lr = self.versus
        if not lr.decidable:
            return (
                f"{CANNOT_DECIDE.format(n1=lr.n1, n2=lr.n2)} (vs {self.baseline}: no outcome could reach "
                f"p <= {ALPHA:g}, the smallest possible being {lr.min_p:.2g})"
            )
        found = f"{versus_word(lr)} {'than' if lr.significant else 'vs'}"
        return f"{lr.method()} p={lr.p:.2g}: {found} {self.baseline}"


def versus_word(lr: LogRank) -> str:
    """The log-rank's decision: faster, slower, no difference detected, or cannot decide with n1
    vs n2 seeds (no outcome at these seeds could reach ALPHA)."""
    if not lr.decidable:
        return CANNOT_DECIDE.format(n1=lr.n1, n2=lr.n2)
    if not lr.significant:
        return NO_DIFFERENCE
    return FASTER if lr.faster else SLOWER


def target_of(protocol: dict[str, Any]) -> float | None:
    """The experiment's target: protocol.learn_target, else 0.9 accuracy for a task metric."""
    value = protocol.get("learn_target")
    if isinstance(value, (int, float)) and is_number(value):
        return float(value)
    return DEFAULT_ACCURACY_TARGET if metric_of(protocol) == "accuracy" else None


def first_at_target(curve: pd.DataFrame, target: float, higher_is_better: bool = True) -> pd.Series | None:
    """The first evaluation (by step) of ``curve`` (step, tokens, elapsed_s, value) at or past ``target``."""
    curve = curve.sort_values("step")
    values = pd.to_numeric(curve["value"], errors="coerce")
    hit = curve[values >= target] if higher_is_better else curve[values <= target]
    return None if hit.empty else hit.iloc[0]


def _times(data: StoreData, sel: Selection, metric: str, target: float) -> tuple[dict[str, list[float]], list[bool]]:
    runs = sel.runs[sel.runs["status"].isin(["done", "diverged"])]
    curves = data.metrics_of(runs["id"], f"val/{metric}")
    times: dict[str, list[float]] = {u: [] for u in UNITS}
    reached: list[bool] = []
    for run_id in runs["id"]:
        curve = curves[curves["run_id"] == run_id].sort_values("step")
        if curve.empty:
            continue
        hit = first_at_target(curve, target, higher_is_better=metric == "accuracy")
        row = hit if hit is not None else curve.iloc[-1]  # first reached, else the budget's end
        for unit in UNITS:
            times[unit].append(float(row[_COLUMN[unit]]))
        reached.append(hit is not None)
    return times, reached


def stated_medians(times: dict[str, list[float]], reached: list[bool]) -> dict[str, Median]:
    """The Kaplan-Meier median in each unit, stated in every unit or in none: only where at least half
    the seeds reached the target. The units are clocks of one event; a seed that never reached it is
    censored at its own end in each, so a clock other than the budget's can end a censored seed before
    a slower seed's event, and its median would count that seed as still able to reach it."""
    medians = {u: median_time(times[u], reached) for u in UNITS}
    if 2 * sum(reached) >= len(reached):
        return medians  # then every unit's curve falls to 0.5: fewer censored seeds at risk only lower it
    return {u: Median(None, None, None, m.events, m.n) for u, m in medians.items()}


def experiment_rows(data: StoreData, exp: str) -> list[Row]:
    """The time-to-learn rows of one experiment (baseline first); [] without a target."""
    runs = data.runs_of("train")
    runs = runs[runs["experiment"] == exp]
    sels = select(runs)
    if not sels:
        return []
    protocol = protocol_of(sels[0])
    target, metric = target_of(protocol), metric_of(protocol)
    if target is None:
        return []
    baseline = baselines_of(protocol)[0]
    rows: list[Row] = []
    for sel in sels:
        times, reached = _times(data, sel, metric, target)
        if reached:
            rows.append(Row(sel, metric, target, times, reached, stated_medians(times, reached)))
    out: list[Row] = []
    for row in rows:
        base = next((r for r in rows if r.sel.variant == baseline and r.sel.model == row.sel.model), None)
        if base is None or base is row:
            out.append(row)
            continue
        lr = log_rank(row.times["steps"], row.reached, base.times["steps"], base.reached)
        out.append(Row(row.sel, metric, target, row.times, row.reached, row.medians, lr, base.sel.label))
    return sorted(out, key=lambda r: (r.sel.model, r.baseline is not None))


def _experiments(data: StoreData) -> list[str]:
    train = data.runs_of("train")
    return [str(e) for e in dict.fromkeys(train["experiment"])]


def time_to_learn_sections(data: StoreData) -> list[Section]:
    raws: list[dict[str, Any]] = []
    views: list[dict[str, str]] = []
    for exp in _experiments(data):
        for r in experiment_rows(data, exp):
            n = len(r.reached)
            raws.append(
                {
                    "experiment": exp,
                    "variant": r.sel.label,
                    "model": r.sel.model_label,
                    "target": r.target,
                    "metric": r.metric,
                    "seeds": n,
                    "reached": sum(r.reached),
                    **{f"median_{u}": r.medians[u].median for u in UNITS},
                    **{f"median_{u}_lo": r.medians[u].lo for u in UNITS},
                    **{f"median_{u}_hi": r.medians[u].hi for u in UNITS},
                    "logrank_chi2": r.versus.chi2 if r.versus else None,  # the statistic; its p is a permutation p
                    "logrank_p": r.versus.p if r.versus else None,
                    "logrank_min_p": r.versus.min_p if r.versus else None,
                    "logrank_exact": r.versus.exact if r.versus else None,
                    "logrank_decidable": r.versus.decidable if r.versus else None,
                }
            )
            views.append(
                {
                    "experiment": exp,
                    "variant": r.sel.label,
                    "model": r.sel.model_label,
                    "target (validation)": r.target_text(),
                    "reached (others censored)": r.reached_text(),
                    **{f"{u} [95%]": r.time_text(u) for u in UNITS},
                    "log-rank vs baseline": r.versus_text(),
                }
            )
    if not raws:
        return []
    intro = (
        "The second question, apart from final quality at the budget: how soon each variant first reaches the "
        f"target. At small budgets this is mostly what a run can answer. Method: {METHOD}."
    )
    note = (
        "Reached: how many seeds reached the target; the others are censored at their budget and counted as "
        "such in the median and the test. Steps, tokens and seconds time one event, so a median is stated in "
        "every unit or in none: where fewer than half the seeds reached the target, each says 'median not "
        "reached' (a censored seed ends at its own last step and its own last second, and a fast seed can end "
        "in seconds before a slower seed's event: that clock's Kaplan-Meier would count it as still at risk). "
        "Log-rank: a permutation p (exact up to "
        f"{EXACT_LIMIT:,} re-assignments, else Monte Carlo), never a chi-squared one; 'cannot decide with n1 "
        "vs n2 seeds' where no re-assignment of the seeds could give "
        f"p <= {ALPHA:g}. Raw table: logrank_chi2 is the statistic, logrank_p its permutation p, logrank_min_p the "
        "smallest p these seeds allow."
    )
    table = Table(
        "time-to-learn", "Time to learn: first evaluation at the target", pd.DataFrame(raws), pd.DataFrame(views), note
    )
    return [Section("Time to learn", intro=intro, tables=[table])]


def _versus_clause(r: Row) -> str:
    """'; exact permutation log-rank vs softmax p=0.0022: faster' or '; log-rank vs softmax: cannot
    decide with 3 vs 3 seeds'; '' for the baseline and where neither reached the target."""
    lr = r.versus
    if r.baseline is None or lr is None:
        return ""
    if not lr.decidable:
        return f"; log-rank vs {r.baseline}: {versus_word(lr)}"
    return f"; {lr.method()} vs {r.baseline} p={lr.p:.2g}: {versus_word(lr)}"


def clause(data: StoreData, exp: str) -> str | None:
    """The first screen's sentence for an experiment whose final decisions are all undetermined:
    'recall, time to 0.9 accuracy (...): deltanet reaches it in 800 steps [600, 1000] (3 of 3
    seeds reached it; log-rank vs softmax: cannot decide with 3 vs 3 seeds); softmax did not reach
    0.9 accuracy in 3000 steps (0 of 3 seeds reached it)'."""
    rows = experiment_rows(data, exp)
    if not rows:
        return None
    parts = []
    for r in sorted(rows, key=lambda r: r.baseline is None):  # the variants first, then the baseline
        if r.medians["steps"].median is None:
            text = f"{r.sel.label} {r.time_text('steps')}"
        else:
            text = f"{r.sel.label} reaches it in {r.time_text('steps').replace(' [', ' steps [', 1)}"
        text += f" ({r.reached_text()} reached it{_versus_clause(r)})"
        parts.append(text)
    head = f"{exp}, time to {rows[0].target_text()} ({NO_FINAL_DECISION.format(metric=rows[0].metric)})"
    return f"{head}: " + "; ".join(parts)


def undecided_clauses(data: StoreData, summary: pd.DataFrame) -> list[str]:
    """Time-to-learn sentences for each experiment of the summary table whose rows against the
    baseline are none of them decided (better / worse / equivalent) at the final budget."""
    decided = {BETTER, WORSE, EQUIVALENT}
    out = []
    for exp in dict.fromkeys(summary["experiment"]):
        rows = summary[(summary["experiment"] == exp) & (summary["decision"] != BASELINE)]
        if rows.empty or any(d in decided for d in rows["decision"]):
            continue
        text = clause(data, str(exp))
        if text:
            out.append(text)
    return out
