"""Documents longer than a checkpoint can read, for the lm-eval model: refused by default,
or (model_args ``truncate=left``) scored on their last tokens and counted per task.

The reach is the model's ``length_limit()``: the context for learned positions, a mixer's
declared limit otherwise, none at all for a model without positions and without a limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnbench.errors import DocumentTooLongError, ModelArgsError

TRUNCATE = {"none": "refuse a document longer than the model reads (default)", "left": "score it on its tail"}


def truncate_mode(value: str | None) -> str:
    """The ``truncate`` model argument, checked: "none" (default) or "left"."""
    mode = "none" if value in (None, "") else str(value)
    if mode not in TRUNCATE:
        raise ModelArgsError(f"model_args truncate={value!r} is not accepted; accepted: {', '.join(TRUNCATE)}")
    return mode


@dataclass
class Reach:
    """How many input tokens the model reads (``limit``; None: any number), and the
    documents seen and cut so far, per task."""

    limit: int | None
    reason: str
    truncate: str = "none"
    seen: dict[str, set[Any]] = field(default_factory=dict)
    cut: dict[str, set[Any]] = field(default_factory=dict)

    def admit(self, requests: list[Any], needs: list[int]) -> None:
        """Count each request's document (``needs``: the input tokens it takes to score it
        whole). Raises DocumentTooLongError, before anything is scored, when one needs more
        than ``limit`` and ``truncate`` is "none"."""
        over: dict[str, dict[Any, int]] = {}  # task -> document -> most tokens one of its requests needs
        seen: dict[str, set[Any]] = {}
        for r, (req, need) in enumerate(zip(requests, needs, strict=True)):
            task, doc = _document(req, r)
            seen.setdefault(task, set()).add(doc)
            if self.limit is not None and need > self.limit:
                docs = over.setdefault(task, {})
                docs[doc] = max(need, docs.get(doc, 0))
        if over and self.truncate == "none":
            task, docs = next(iter(over.items()))
            raise DocumentTooLongError(self._refusal(task, len(docs), len(seen[task]), max(docs.values())))
        for task, docs in over.items():
            self.cut.setdefault(task, set()).update(docs)
        for task, docs in seen.items():
            self.seen.setdefault(task, set()).update(docs)

    def _refusal(self, task: str, n_over: int, n: int, longest: int) -> str:
        return (
            f"task {task}: {n_over} of {n} documents are longer than this checkpoint reads (longest needs "
            f"{longest} tokens; it reads {self.limit}: {self.reason}), so they would be scored on their last "
            f"{self.limit} tokens only. Train with a longer context (model context: {longest} or more) or "
            "without positions (model positions: none), or score each on its tail and count it in the "
            "results with truncate=left (--model_args ...,truncate=left; in a suite, lm_eval: {truncate: left})"
        )

    def truncated(self) -> dict[str, str]:
        """Per task that had a document cut: "n of N documents truncated to the last L tokens"."""
        last = f"documents truncated to their last {self.limit} tokens"
        return {
            task: f"{len(docs)} of {len(self.seen.get(task, docs))} {last}" for task, docs in sorted(self.cut.items())
        }


def _document(request: Any, index: int) -> tuple[str, Any]:
    """(task, document id) of an lm-eval request; a request without them is its own document."""
    task = getattr(request, "task_name", None) or "(no task)"
    doc = getattr(request, "doc_id", None)
    return task, (doc if doc is not None else ("request", id(request), index))
