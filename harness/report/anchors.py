"""The anchors section: public reference configurations reproduced in-harness
(suites/anchors.yaml), each with the reference value, ours, and pass/fail, so a reader
sees the baseline is right before comparing anything to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from attnbench.decision_words import ANCHOR_RUN_STATUS, CHECK_FAIL, CHECK_PASS, CONFIGURATION_DIFFERS, NOT_RUN
from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.values import MISSING, is_number, num, seconds_text


@dataclass(frozen=True)
class Anchor:
    """A published figure and the rule ours must meet, for one experiment's variant."""

    experiment: str  # experiment name in the suite
    variant: str
    metric: str  # key of the run summary (val_loss, val_accuracy)
    reference: float
    rule: str  # "within" (|ours - reference| <= tolerance) or "at_least" (ours >= reference)
    source: str
    tolerance: float = 0.0
    # Settings the reference needs, as dotted paths into the run's config: a run that
    # differs is shown as "configuration differs", never compared.
    requires: dict[str, Any] = field(default_factory=dict)

    def passes(self, ours: float) -> bool:
        if self.rule == "within":
            return abs(ours - self.reference) <= self.tolerance + 1e-9  # 1.93 - 1.88 is 0.05000000000000004
        return ours >= self.reference

    def result(self, ours: float) -> str:
        """'pass' or 'FAIL': whether ``ours`` meets the reference's rule."""
        return CHECK_PASS if self.passes(ours) else CHECK_FAIL

    def rule_text(self) -> str:
        return f"within ±{self.tolerance:g}" if self.rule == "within" else f">= {self.reference:g}"


ANCHORS = (
    Anchor(
        "nanogpt-shakespeare-char",
        "softmax",
        "val_loss",
        1.88,
        "within",
        "nanoGPT README (karpathy/nanoGPT), CPU Shakespeare-char: val loss 1.88 (published)",
        tolerance=0.05,
        requires={
            "model.d_model": 128,
            "model.n_layer": 4,
            "model.n_head": 4,
            "model.context": 64,
            "model.dropout": 0.0,
            "model.bias": False,
            "train.batch_size": 12,
            "train.seq_len": 64,
            "train.budget.steps": 2000,
            "train.lr": 1e-3,
            "train.warmup_steps": 100,
            "train.min_lr_ratio": 0.1,
            "train.beta2": 0.99,
            "data.source": "builtin",
            "data.tokenizer": "bytes",
        },
    ),
    Anchor(
        "mqar",
        "softmax",
        "val_accuracy",
        0.99,
        "at_least",
        "Zoology (Arora et al. 2023) MQAR: attention solves T 64, 4 pairs, vocab 8192 (>= 0.99)",
        requires={
            "data.task": "mqar",
            "data.task_options.seq_len": 64,
            "data.task_options.num_kv_pairs": 4,
            "data.task_options.vocab_size": 8192,
        },
    ),
)


def _get(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _differs(anchor: Anchor, config: dict[str, Any]) -> list[str]:
    return [f"{k}={_get(config, k)!r} (needs {v!r})" for k, v in anchor.requires.items() if _get(config, k) != v]


def _row(anchor: Anchor, run: pd.Series | None) -> dict[str, Any]:
    row = {
        "anchor": anchor.experiment,
        "variant": anchor.variant,
        "metric": anchor.metric,
        "reference": anchor.reference,
        "rule": anchor.rule_text(),
        "source": anchor.source,
        "ours": None,
        "result": NOT_RUN,
        "wall_s": None,
        "note": "",
    }
    if run is None:
        return row
    ours = run["summary"].get(anchor.metric)
    differs = _differs(anchor, run["config"])
    wall = run["finished_at"] - run["started_at"] if is_number(run.get("finished_at")) else None
    row.update(ours=ours, wall_s=wall)
    if run["status"] != "done" or not is_number(ours):
        row.update(result=ANCHOR_RUN_STATUS.format(status=run["status"]))
    elif differs:
        row.update(result=CONFIGURATION_DIFFERS, note="; ".join(differs))
    else:
        row.update(result=anchor.result(ours))
    return row


def anchor_section(data: StoreData) -> list[Section]:
    """One table over the anchors whose experiment this suite ran; none when it ran none."""
    runs = data.runs_of("train")
    present = [a for a in ANCHORS if (runs["experiment"] == a.experiment).any()]
    if not present:
        return []
    rows = []
    for anchor in present:
        mine = runs[(runs["experiment"] == anchor.experiment) & (runs["variant"] == anchor.variant)]
        rows.append(_row(anchor, mine.sort_values("id").iloc[-1] if len(mine) else None))
    frame = pd.DataFrame(rows)
    view = frame.assign(
        reference=frame["reference"].map(num),
        ours=frame["ours"].map(lambda v: num(v) if is_number(v) else MISSING),
        wall_s=frame["wall_s"].map(lambda v: seconds_text(v) if is_number(v) else MISSING),
    )
    table = Table(
        "anchors",
        "Public anchors: reference, ours, pass/fail",
        frame,
        view,
        note="ours is the latest run of the anchor's experiment; wall time includes evaluation",
    )
    return [
        Section(
            "Anchors",
            intro=(
                "Public reference configurations reproduced in this harness "
                "(suites/anchors.yaml): the baseline must match them before "
                "anything is compared to it."
            ),
            tables=[table],
        )
    ]
