"""Time to learn: from each run's stored validation curve, the steps, tokens and seconds until a
variant first reaches a target (task accuracy, default 0.9 of the ceiling 1.0; a loss for text,
``protocol.learn_target``). A seed that never reaches it is censored at its budget, never
dropped. Per variant: the Kaplan-Meier median over seeds with a Brookmeyer-Crowley interval;
against the baseline: the log-rank test on steps (report/survival.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.paired import baselines_of, metric_of, protocol_of
from attnbench.report.selection import Selection, select
from attnbench.report.survival import LogRank, Median, log_rank, median_time
from attnbench.report.values import MISSING, is_number

DEFAULT_ACCURACY_TARGET = 0.9  # of the task's ceiling, accuracy 1.0
UNITS = ("steps", "tokens", "seconds")
_COLUMN = {"steps": "step", "tokens": "tokens", "seconds": "elapsed_s"}
METHOD = (
    "a seed's time is the first validation evaluation at or past the target (so it is known to the "
    "evaluation interval); a seed that never reaches it is censored at its budget. Median over seeds: "
    "Kaplan-Meier, with a Brookmeyer-Crowley 95% interval (Greenwood variance, linear scale); against the "
    "baseline: log-rank test (Mantel) on steps, at 5%"
)


def amount(unit: str, x: float | None) -> str:
    """A time in ``unit`` as the table shows it: whole steps and tokens, seconds to 3 digits."""
    if x is None:
        return "not reached"
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

    def time_text(self, unit: str = "steps") -> str:
        """'800 [600, 1000]' or 'did not reach 0.9 accuracy in 3000 steps (censored, 3/3 seeds)'."""
        m, n = self.medians[unit], len(self.reached)
        if m.median is None:
            budget = amount(unit, max(self.times[unit]) if self.times[unit] else None)
            return f"did not reach {self.target_text()} in {budget} {unit} (censored, {n - m.events}/{n} seeds)"
        lo = MISSING if m.lo is None else amount(unit, m.lo)
        censored = f"; censored {n - m.events}/{n}" if m.events < n else ""
        return f"{amount(unit, m.median)} [{lo}, {amount(unit, m.hi)}]{censored}"

    def versus_text(self) -> str:
        if self.baseline is None:
            return "baseline"
        if self.versus is None:
            return f"neither reached it (vs {self.baseline})"
        lr = self.versus
        found = ("faster" if lr.faster else "slower") if lr.p < 0.05 else "no difference detected"
        return f"chi2 {lr.chi2:.2f}, p={lr.p:.2g}: {found} than {self.baseline}"


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
    curves = data.metrics[data.metrics["run_id"].isin(runs["id"]) & (data.metrics["name"] == f"val/{metric}")]
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
            medians = {u: median_time(times[u], reached) for u in UNITS}
            rows.append(Row(sel, metric, target, times, reached, medians))
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
                    "logrank_chi2": r.versus.chi2 if r.versus else None,
                    "logrank_p": r.versus.p if r.versus else None,
                }
            )
            views.append(
                {
                    "experiment": exp,
                    "variant": r.sel.label,
                    "model": r.sel.model_label,
                    "target (validation)": r.target_text(),
                    "reached": f"{sum(r.reached)}/{n} seeds",
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
    table = Table(
        "time-to-learn", "Time to learn: first evaluation at the target", pd.DataFrame(raws), pd.DataFrame(views)
    )
    return [Section("Time to learn", intro=intro, tables=[table])]


def clause(data: StoreData, exp: str) -> str | None:
    """The first screen's sentence for an experiment whose final decisions are all undetermined:
    'recall, time to 0.9 accuracy (...): deltanet reaches it in 800 steps [600, 1000]; softmax did
    not reach it in 3000 steps (censored, 3/3 seeds)'."""
    rows = experiment_rows(data, exp)
    if not rows:
        return None
    parts = []
    for r in sorted(rows, key=lambda r: r.baseline is None):  # the variants first, then the baseline
        if r.medians["steps"].median is None:
            text = f"{r.sel.label} {r.time_text('steps')}"
        else:
            text = f"{r.sel.label} reaches it in {r.time_text('steps').replace(' [', ' steps [', 1)}"
        if r.baseline is not None and r.versus is not None:
            text += f" (log-rank vs {r.baseline} p={r.versus.p:.2g})"
        parts.append(text)
    head = f"{exp}, time to {rows[0].target_text()} (every final {rows[0].metric} undetermined at this budget)"
    return f"{head}: " + "; ".join(parts)


def undecided_clauses(data: StoreData, summary: pd.DataFrame) -> list[str]:
    """Time-to-learn sentences for each experiment of the summary table whose rows against the
    baseline are none of them decided (better / worse / equivalent) at the final budget."""
    decided = {"better", "worse", "equivalent"}
    out = []
    for exp in dict.fromkeys(summary["experiment"]):
        rows = summary[(summary["experiment"] == exp) & (summary["decision"] != "baseline")]
        if rows.empty or any(d in decided for d in rows["decision"]):
            continue
        text = clause(data, str(exp))
        if text:
            out.append(text)
    return out
