"""Which seed makes a text run slow: the initialisation or the batch order (issue 70). Trains quick's
text cell (2 layers x d_model 64, 16 x 64 bytes) with the model initialised from one seed and the
batches drawn from another, and prints the test loss and the validation curve.

    python benchmarks/slow_mode.py --lr 6e-3 --pairs 6:6 6:0 0:6 --steps 600

At 6e-3 and 600 steps (2026-12-07): init 6 / data 6 2.472, init 6 / data 0 2.088, init 0 / data 6
2.090; init 8 / data 2 2.436, init 2 / data 8 2.102: the initialisation decides.
"""

from __future__ import annotations

import argparse
import json

import torch

from attnbench.data.loading import load_corpus
from attnbench.experiments.registry import expand_suite
from attnbench.experiments.train import loop
from attnbench.plan.cells import rekey
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import load_registry


def train(lr: float, init_seed: int, data_seed: int, steps: int, variant: str) -> dict:
    """One text cell of quick at ``lr``: weights from ``init_seed``, batches from ``data_seed``."""
    registry = load_registry()
    sets = [f"experiments.text.train.lr={lr}", f"experiments.text.train.budget.steps={steps}"]
    sets += [
        "experiments.text.protocol.tune=false",
        "experiments.text.protocol.tuning=null",
        "experiments.text.grid={}",
    ]
    suite = load_suite("quick", sets)
    cell = next(
        c for c in expand_suite(suite, registry, device="cpu") if c.experiment == "text" and c.variant == variant
    )
    data = load_corpus(cell.data_spec(), registry)
    build = loop.build_model

    def seeded_build(v, c):  # the loop seeds torch with the cell's seed (the data seed) just before
        torch.manual_seed(init_seed)
        return build(v, c)

    loop.build_model = seeded_build
    try:
        cell = rekey(cell, seed=data_seed, coords={**cell.coords, "seed": data_seed})
        out = loop.train_cell(cell, registry.variants[variant], data, torch.device("cpu"))
    finally:
        loop.build_model = build
    curve = [(m.step, round(m.value, 3)) for m in out.metrics if m.name == "val/loss" and m.value is not None]
    return {"init": init_seed, "data": data_seed, "test_loss": out.summary.get("test_loss"), "val_curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lr", type=float, default=6e-3)
    parser.add_argument("--pairs", nargs="+", default=["6:6", "6:0", "0:6"], help="INIT:DATA seed pairs")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--variant", default="softmax")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for pair in args.pairs:
        init, data = (int(x) for x in pair.split(":"))
        print(json.dumps({"lr": args.lr, **train(args.lr, init, data, args.steps, args.variant)}))


if __name__ == "__main__":
    main()
