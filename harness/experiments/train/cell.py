"""The `train` kind: train a cell to its budget on its data, evaluate, checkpoint."""

from __future__ import annotations

from attnbench.contract.variant import Variant
from attnbench.data.loading import load_corpus
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext
from attnbench.experiments.train.loop import train_cell
from attnbench.plan.cells import Cell


def run_train_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    return train_cell(cell, variant, load_corpus(cell.data, ctx.registry), ctx.device,
                      ctx.progress, ctx.checkpoint_dir)


KIND = Kind("train", run_train_cell, code=(*COMMON_CODE, "attnbench.experiments.train", "attnbench.distributed"),
            data_parallel=True)
