"""Per-seed test readings of a chosen grid point, and their paired decision against the
baseline on the protocol's metric (overall, or at one evaluation setting), made only when
both have learned (cleared their null level)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from attnbench.decision_words import NO_INTERVAL, NO_INTERVAL_REQUESTED, NO_PAIRED_SEEDS
from attnbench.report.decision import Decision, decide
from attnbench.report.floors import Floor, floor_of
from attnbench.report.learned import Learned, gate, learned
from attnbench.report.load import StoreData
from attnbench.report.selection import Selection
from attnbench.report.values import is_number
from attnbench.stats.sequential import Design, design_of

HIGHER_IS_BETTER = {"loss": False, "accuracy": True}
NO_INTERVAL_TEXT = NO_INTERVAL_REQUESTED  # a row whose protocol asked for no interval (interval: false)


@dataclass(frozen=True)
class NoInterval(Decision):
    """No interval and no decision, as the protocol asked (``interval: false``): the per-seed
    differences and their mean only."""

    diffs: tuple[float, ...] = ()

    def word(self) -> str:
        return NO_INTERVAL_TEXT

    def text(self, unit: str = "", decimals: int | None = None) -> str:
        """e.g. "+0.012 (per seed +0.010, +0.014), n=2, no interval requested (protocol.interval: false)"."""
        if self.mean is None:
            return f"{NO_PAIRED_SEEDS}, {NO_INTERVAL_TEXT}"
        fmt = "+.3g" if decimals is None else f"+.{decimals}f"
        per = ", ".join(f"{d:{fmt}}" for d in self.diffs)
        return f"{self.mean:{fmt}}{unit} (per seed {per}), n={self.n}, {NO_INTERVAL_TEXT}"


def no_interval(diffs: list[float], margin: float | None) -> NoInterval:
    """The row of a protocol with ``interval: false``: the mean of the per-seed differences, no decision."""
    finite = tuple(float(d) for d in diffs if d is not None and math.isfinite(d))
    mean = statistics.fmean(finite) if finite else None
    return NoInterval(NO_INTERVAL, mean, None, None, len(finite), margin, diffs=finite)


def wants_interval(protocol: dict[str, Any]) -> bool:
    """Whether the protocol asked for an interval and a decision (``interval``, default true)."""
    return protocol.get("interval", True) is not False


def protocol_of(sel: Selection) -> dict[str, Any]:
    for s in sel.runs["summary"]:
        if isinstance(s.get("protocol"), dict):
            return s["protocol"]
    return {}


def metric_of(protocol: dict[str, Any]) -> str:
    """The metric decisions read (stores written before it defaulted by data kind say loss)."""
    return protocol.get("metric") or "loss"


def baselines_of(protocol: dict[str, Any], default: str = "softmax") -> list[str]:
    """The protocol's baselines, the leading one first (``baselines``, else the one ``baseline``)."""
    return list(protocol.get("baselines") or [protocol.get("baseline") or default])


def eval_settings(sel: Selection) -> list[dict[str, Any]]:
    """The task settings the experiment scores separately (empty for text)."""
    for config in sel.runs["config"]:
        data = config.get("data") or {}
        return list(data.get("eval_settings") or [])
    return []


def setting_label(setting: dict[str, Any] | None) -> str:
    return "all test sets" if not setting else ", ".join(f"{k}={v}" for k, v in setting.items())


def seed_values(
    data: StoreData, sel: Selection, metric: str, setting: dict[str, Any] | None = None
) -> dict[int, float]:
    """Test ``metric`` per seed of the finished runs: the summary's mean over test sets, or
    the result row of one evaluation ``setting``."""
    done = sel.runs[sel.runs["status"] == "done"]
    if setting is None:
        key = f"test_{metric}"
        return {
            int(seed): float(s[key])
            for seed, s in zip(done["seed"], done["summary"], strict=True)
            if is_number(s.get(key))
        }
    seeds = dict(zip(done["id"], done["seed"], strict=True))
    res = data.results[data.results["run_id"].isin(seeds) & (data.results["name"] == metric)]
    out: dict[int, float] = {}
    for run_id, value, tags in zip(res["run_id"], res["value"], res["tags"], strict=True):
        if tags.get("split") == "test" and all(tags.get(k) == v for k, v in setting.items()) and is_number(value):
            out[int(seeds[run_id])] = float(value)
    return out


def seed_answers(data: StoreData, sel: Selection, setting: dict[str, Any] | None = None) -> dict[int, float]:
    """The answer count behind each seed's test accuracy (summed over the test sets, or at one
    evaluation ``setting``); empty where none was stored (text, or older stores)."""
    done = sel.runs[sel.runs["status"] == "done"]
    seeds = dict(zip(done["id"], done["seed"], strict=True))
    res = data.results[data.results["run_id"].isin(seeds) & (data.results["name"] == "answers")]
    out: dict[int, float] = {}
    for run_id, value, tags in zip(res["run_id"], res["value"], res["tags"], strict=True):
        at = tags.get("split") == "test" and all(tags.get(k) == v for k, v in (setting or {}).items())
        if at and is_number(value):
            out[int(seeds[run_id])] = out.get(int(seeds[run_id]), 0.0) + float(value)
    return out


def compare_rows(
    mine: dict[int, float],
    theirs: dict[int, float],
    floor: Floor | None,
    higher_is_better: bool,
    margin: float | None,
    design: Design | None = None,
    answers: tuple[dict[int, float], dict[int, float]] = ({}, {}),
    labels: tuple[str, str] = ("variant", "baseline"),
) -> Decision:
    """The decision on two rows' per-seed test values (seed -> value), paired by seed: gated by
    whether each learned (``answers``: the counts behind per-seed accuracies), on the share of
    learned seeds where seeds split, else the paired decision of ``design`` (None: fixed seeds)."""
    diffs = [mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))]
    decision = decide(diffs, margin, higher_is_better, design)
    alpha = 0.05 if design is None else design.look_alpha(len(diffs))
    return gate(decision, learned(mine, floor, answers[0]), learned(theirs, floor, answers[1]), *labels, alpha)


def paired_decision(
    data: StoreData,
    sel: Selection,
    base: Selection,
    metric: str,
    margin: float | None,
    setting: dict[str, Any] | None = None,
) -> tuple[Decision, list[float]]:
    """The decision on variant - baseline over the seeds both finished, and those differences;
    "not learned" (no decision) when either has not cleared its null level on any seed, the
    share test where the seeds of either split across it."""
    mine, theirs = seed_values(data, sel, metric, setting), seed_values(data, base, metric, setting)
    diffs = [mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))]
    floor = floor_of(data, sel, metric, setting) or floor_of(data, base, metric, setting)
    counted = metric == "accuracy"
    answers = (seed_answers(data, sel, setting), seed_answers(data, base, setting)) if counted else ({}, {})
    design = design_of(protocol_of(sel))  # seeds until decided: the group-sequential rule
    labels = (sel.label, base.label)
    return compare_rows(mine, theirs, floor, HIGHER_IS_BETTER[metric], margin, design, answers, labels), diffs


def learned_of(data: StoreData, sel: Selection, metric: str, setting: dict[str, Any] | None = None) -> Learned:
    """Whether ``sel`` cleared its null level on the test ``metric`` (overall, or at ``setting``)."""
    answers = seed_answers(data, sel, setting) if metric == "accuracy" else {}
    return learned(seed_values(data, sel, metric, setting), floor_of(data, sel, metric, setting), answers)
