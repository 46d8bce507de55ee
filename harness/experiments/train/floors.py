"""The null levels of a train cell's data as result rows (and summary values), computed once per
cell from its data: per text split, n-gram cross-entropy on exactly the windows the model is scored
on (tagged with their ``targets`` fingerprint, as the model's rows are); per task evaluation set,
the measured null (the best of binding-free predictors fitted on the training examples, and the
declared level)."""

from __future__ import annotations

import math
from typing import Any

from attnbench.data.floors import ORDERS, SMOOTHING, guess_method, task_floors, text_floors
from attnbench.experiments.train.summary import headline
from attnbench.plan.base import TrainSpec
from attnbench.plan.cells import Cell
from attnbench.store.database import Result


def floor_rows(data: Any, cell: Cell | None = None) -> list[Result]:
    """Rows tagged like the evaluation rows they stand beside: ``floor_<order>_loss`` (nats/token)
    and ``floor_<order>_bpb`` per text split; per task evaluation set ``guess_accuracy``, the
    measured null, tagged with the winning predictor (``null_predictor``) and every candidate's
    accuracy (``null_levels``: name -> accuracy, the declared level as "declared")."""
    task = getattr(data, "task", None)
    if task is None:
        if cell is None:
            raise TypeError("a text corpus's floors are scored on a cell's evaluation windows: pass the cell")
        t = cell.spec_as(TrainSpec)
        rows = []
        for split, nats in text_floors(data, t.batch_size, t.seq_len, t.eval_tokens).items():
            tags = {"split": split, "targets": nats["targets"]}
            for order in ORDERS:
                bpb = nats[order] / math.log(2) / data.bytes_per_token
                rows.append(Result(f"floor_{order}_loss", nats[order], "nats/token", dict(tags)))
                rows.append(Result(f"floor_{order}_bpb", bpb, "bits/byte", dict(tags)))
        return rows
    return [
        Result(
            "guess_accuracy",
            null.value,
            "",
            {
                "split": split,
                "task": task.name,
                **task.coords(options),
                "null_predictor": null.predictor,
                "null_levels": dict(null.levels),
            },
        )
        for split, options, null in task_floors(data)
    ]


def floor_summary(data: Any, rows: list[Result]) -> dict[str, Any]:
    """``val_``/``test_`` means of the floor rows (as the evaluation's own summary values are),
    and how the floors were found."""
    task = getattr(data, "task", None)
    targets = {f"{r.tags['split']}_floor_targets": r.tags["targets"] for r in rows if "targets" in r.tags}
    return {
        **{f"val_{k}": v for k, v in headline(rows, "val").items()},
        **{f"test_{k}": v for k, v in headline(rows, "test").items()},
        **targets,
        "floor_method": SMOOTHING if task is None else guess_method(task),
    }


def targets_summary(rows: list[Result]) -> dict[str, str]:
    """``<split>_targets``: the fingerprint of the windows the model's own loss was scored on."""
    return {f"{r.tags['split']}_targets": r.tags["targets"] for r in rows if r.name == "loss" and "targets" in r.tags}
