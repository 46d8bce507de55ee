"""The `train` kind: train a cell to its budget on its data, evaluate, checkpoint."""

from __future__ import annotations

from attnbench import distributed
from attnbench.contract.variant import Variant
from attnbench.data.loading import load_corpus
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext
from attnbench.experiments.train.floors import floor_rows, floor_summary, targets_summary
from attnbench.experiments.train.loop import train_cell
from attnbench.plan.cells import Cell


def run_train_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    data = load_corpus(cell.data_spec(), ctx.registry)
    outcome = train_cell(cell, variant, data, ctx.device, ctx.progress, ctx.checkpoint_dir, ctx.live)
    if distributed.is_main():  # the null levels beside the evaluation rows
        floors = floor_rows(data, cell)
        outcome.summary |= targets_summary(outcome.results) | floor_summary(data, floors)
        outcome.results.extend(floors)
    if cell.protocol is not None:  # the choice rule and the splits, recorded with the result
        outcome.summary["protocol"] = {**cell.protocol, "splits": split_description(cell.data)}
    return outcome


def split_description(data) -> dict[str, str]:
    """Where each split came from, in words (recorded with every protocol result)."""
    if data.source == "task":
        return {
            "train": f"{data.train_examples} examples (seed stream 0)",
            "val": f"{data.val_examples} examples (seed stream 1000003)",
            "test": f"{data.test_examples} fresh examples (seed stream 2000003)",
        }
    test = f"file(s) {data.test_path}" if data.test_path else f"the last {data.test_fraction:g} of the corpus"
    if data.val_path:
        val = f"file(s) {data.val_path}"
    else:
        val = f"a {data.val_fraction:g} slice" + (" before the test slice" if data.test_fraction else " at the end")
    return {"train": "the head of the corpus", "val": val, "test": test}


KIND = Kind(
    "train",
    run_train_cell,
    code=(*COMMON_CODE, "attnbench.experiments.train", "attnbench.distributed"),
    data_parallel=True,
)
