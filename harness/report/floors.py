"""The null levels a train cell stored beside its evaluation (n-gram cross-entropy for text; for
tasks the measured null, the best accuracy of binding-free predictors and of any declared level),
read back from the store and put in words. A text floor stands beside a model's value only where
both were scored on the same targets (the same ``targets`` fingerprint of the evaluation windows):
a run whose floor covers other bytes (stores before 0.3) has no floor here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from attnbench.report.load import StoreData
from attnbench.report.selection import Selection
from attnbench.report.values import is_number, mean_ci

ORDERS = ("unigram", "bigram", "trigram", "4gram")
STRONGER_ORDERS = ("trigram", "4gram")  # stated beside a text row, never a gate
LEARNED_TEXT_ORDER = "bigram"  # the best a model that mixes no tokens can reach: a learned mixer beats it
NULL = "null"  # a task's measured null level (the stored ``guess_accuracy`` rows)


@dataclass(frozen=True)
class Floor:
    """A null level on one metric: ``name`` (bigram, null), its ``value`` and how it was found."""

    name: str
    value: float
    higher_is_better: bool
    method: str = ""

    def text(self) -> str:
        return f"{self.name} {self.value:.3f}"


def _mean(summaries: Iterable[dict[str, Any]], key: str) -> float | None:
    return mean_ci(s.get(key) for s in summaries).mean


def same_targets(summary: dict[str, Any], split: str = "test") -> bool:
    """Whether a run's text floors on ``split`` were scored on exactly the targets its model was."""
    mine = summary.get(f"{split}_targets")
    return isinstance(mine, str) and mine == summary.get(f"{split}_floor_targets")


def matched(summaries: Iterable[dict[str, Any]], split: str = "test") -> list[dict[str, Any]]:
    """The summaries whose text floors and model value share their targets."""
    return [s for s in summaries if same_targets(s, split)]


def text_floor(summaries: Iterable[dict[str, Any]], order: str, split: str = "test") -> float | None:
    """The mean ``order`` floor over the runs scored on the same targets as their floor."""
    return _mean(matched(summaries, split), f"{split}_floor_{order}_loss")


def _method(sel: Selection) -> str:
    return next((str(s["floor_method"]) for s in sel.runs["summary"] if s.get("floor_method")), "")


def floor_of(data: StoreData, sel: Selection, metric: str, setting: dict[str, Any] | None = None) -> Floor | None:
    """The test-split floor a ``sel`` must clear on ``metric`` (overall, or at one evaluation
    ``setting``); None where the store holds none (runs before floors were stored, task loss)."""
    if metric == "loss":
        value = text_floor(sel.runs["summary"], LEARNED_TEXT_ORDER)
        return None if value is None else Floor(LEARNED_TEXT_ORDER, value, False, _method(sel))
    if metric != "accuracy":
        return None
    if setting is None:
        value = _mean(sel.runs["summary"], "test_guess_accuracy")
    else:
        res = data.results_of(sel.runs["id"], "guess_accuracy", split="test")
        value = mean_ci(
            v
            for v, tags in zip(res["value"], res["tags"], strict=True)
            if all(tags.get(k) == x for k, x in setting.items())
        ).mean
    return None if value is None else Floor(NULL, value, True, _method(sel))


def text_floors_text(summaries: Iterable[dict[str, Any]], split: str) -> str | None:
    """'unigram 3.362 / bigram 2.427 / trigram 1.947 / 4gram 1.651 nats/token (4.85 / 3.50 / 2.81 / 2.38
    bits/byte)', over the runs whose floors share their model's targets."""
    summaries = matched(summaries, split)
    nats = [_mean(summaries, f"{split}_floor_{o}_loss") for o in ORDERS]
    bpb = [_mean(summaries, f"{split}_floor_{o}_bpb") for o in ORDERS]
    if not all(is_number(v) for v in nats):
        return None
    head = " / ".join(f"{o} {v:.3f}" for o, v in zip(ORDERS, nats, strict=True)) + " nats/token"
    return head + (f" ({' / '.join(f'{v:.2f}' for v in bpb)} bits/byte)" if all(is_number(v) for v in bpb) else "")


def floor_note(sel: Selection, split: str) -> str | None:
    """One line naming a selection's null levels on ``split`` and how they were found."""
    summaries = list(sel.runs["summary"])
    text = text_floors_text(summaries, split)
    method = _method(sel)
    if text is not None:
        return (
            f"Null levels ({split} split, on the model's own targets; n-gram models fitted on the training split; "
            f"{method}): {text}. A loss not below the {LEARNED_TEXT_ORDER} has not learned to use context."
        )
    guess = _mean(summaries, f"{split}_guess_accuracy")
    if guess is None:
        return None
    return f"Measured null accuracy ({split} split, mean over evaluation sets; {method}): {guess:.3f}."
