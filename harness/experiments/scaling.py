"""`scaling` experiments: loss against model size at budgets proportional to size.

Each cell (variant x model size x seed) is an ordinary training run (``train_cell``)
whose budget follows the size: ``tokens_per_param`` gives tokens = k * N, or
``flops_per_param`` gives training FLOPs = k * N (N = measured parameter count). The
finalizer fits, per variant,

    L(N) = a * N^-b + c        (and the same against training compute C)

with ``attnbench.fits.fit_power_law`` over the sizes (seeds averaged per size), stored as
one "scaling_fit" run per (experiment, variant) with "power_law" rows (value = b).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from attnbench.contract.variant import Variant
from attnbench.data.loading import load_corpus
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext
from attnbench.experiments.derived import save_derived
from attnbench.experiments.train.loop import train_cell
from attnbench.experiments.train.setup import build_model
from attnbench.fits import fit_power_law
from attnbench.nn.flops import model_facts
from attnbench.plan.cells import Cell
from attnbench.plan.specs import ScalingSpec
from attnbench.registry.identity import code_hash
from attnbench.store.database import Result, Store
from attnbench.store.provenance import device_name

XS = (("params", "n_params"), ("flops", "train_flops"))  # fit against: (tag, summary key)


def run_scaling_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:

    spec = cell.spec_as(ScalingSpec)
    torch.manual_seed(cell.seed)
    n_params = build_model(variant, replace(cell, spec=spec.train_spec(1))).num_params()
    train_spec = spec.train_spec(n_params)
    outcome = train_cell(
        replace(cell, spec=train_spec),
        variant,
        load_corpus(cell.data_spec(), ctx.registry),
        ctx.device,
        ctx.progress,
        ctx.checkpoint_dir,
        ctx.live,
    )
    facts = model_facts(variant, cell.model, spec.seq_len, n_params)
    outcome.summary = {
        **outcome.summary,
        "n_params": n_params,
        "train_flops_per_token": outcome.summary.get("train_flops_per_token", facts["train_flops_per_token"]),
        "budget_rule": spec.budget_rule(),
        "budget": train_spec.budget.model_dump(exclude_none=True),
    }
    return outcome


def _points(runs: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    """(x, mean held-out loss) per model size over its finished seeds."""
    by_model: dict[int, list[tuple[float, float]]] = {}
    for run in runs:
        s = run["summary"]
        x, loss = s.get(key), s.get("val_loss")
        if run["status"] == "done" and x and loss is not None and math.isfinite(loss):
            by_model.setdefault(int(run["coords"].get("model", 0)), []).append((float(x), float(loss)))
    return [(sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v)) for _, v in sorted(by_model.items())]


def power_law_rows(runs: list[dict[str, Any]]) -> list[Result]:
    rows = []
    for x_name, key in XS:
        pts = _points(runs, key)
        tags: dict[str, Any] = {
            "x": x_name,
            "n_points": len(pts),
            "sizes": [x for x, _ in pts],
            "losses": [y for _, y in pts],
        }
        if len(pts) < 3:
            rows.append(
                Result(
                    "power_law",
                    None,
                    "",
                    {
                        **tags,
                        "a": None,
                        "b": None,
                        "c": None,
                        "rmse": None,
                        "error": "needs finished runs at 3 or more sizes",
                    },
                )
            )
            continue
        fit = fit_power_law([x for x, _ in pts], [y for _, y in pts])
        rows.append(Result("power_law", fit.b, "", {**tags, "a": fit.a, "b": fit.b, "c": fit.c, "rmse": fit.rmse}))
    return rows


def finalize_scaling(cells: list[Cell], store: Store, device: torch.device) -> None:
    """Store one "scaling_fit" run per variant of the experiment (idempotent)."""
    if not cells:
        return
    first = cells[0]
    runs = {
        r["cell_key"]: r for r in store.runs(suite=first.suite, kind="scaling") if r["experiment"] == first.experiment
    }
    for variant in dict.fromkeys(c.variant for c in cells):
        vruns = [runs[c.key] for c in cells if c.variant == variant and c.key in runs]
        if not vruns:
            continue
        inputs = {
            "suite": first.suite,
            "experiment": first.experiment,
            "variant": variant,
            "device": device_name(device),
            "cells": sorted(r["cell_key"] for r in vruns),
            "code": code_hash("attnbench.fits", "attnbench.experiments.scaling"),
        }
        save_derived(
            store,
            kind="scaling_fit",
            suite=first.suite,
            experiment=first.experiment,
            variant=variant,
            inputs=inputs,
            device=device,
            results=power_law_rows(vruns),
            summary={"cells": len(vruns), "done": sum(r["status"] == "done" for r in vruns)},
        )


KIND = Kind(
    "scaling",
    run_scaling_cell,
    code=(
        *COMMON_CODE,
        "attnbench.experiments.train",
        "attnbench.experiments.scaling",
        "attnbench.distributed",
        "attnbench.fits",
    ),
    finalize=finalize_scaling,
    data_parallel=True,
)
