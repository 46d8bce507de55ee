"""`scaling` experiments: loss against model size at budgets proportional to size.

Each cell (variant x model size x seed) is an ordinary training run (``train_cell``)
whose budget follows the size: ``tokens_per_param`` gives tokens = k * N, or
``flops_per_param`` gives training FLOPs = k * N (N = measured parameter count, embeddings
included, as Chinchilla counts). Its learning rate is transferred from the suite's by width:

    lr(d_model) = lr * 64 / d_model     (the suite's lr is the rate of a 64-wide model)

the Adam rule of muP (Yang et al. 2021, "Tensor Programs V"; hidden-layer rates fall as
1/width). The finalizer fits, per variant, against non-embedding parameters N and against
training compute C,

    L(x) = a x^-b + c    and    L(x) = a x^-b

with ``attnbench.stats.power_laws.fit_scaling`` (the law the data support, bootstrap intervals over
seeds, lack of fit), stored as one "scaling_fit" run per (experiment, variant) with one
"power_law" row per x (value = b of the supported law; None with fewer than 4 sizes).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from attnbench.contract.variant import Variant
from attnbench.data.loading import load_corpus
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext
from attnbench.experiments.derived import save_derived
from attnbench.experiments.train.loop import build_model, train_cell
from attnbench.nn.flops import model_facts
from attnbench.plan.cells import Cell
from attnbench.plan.scaling_spec import ScalingSpec
from attnbench.registry.identity import code_hash
from attnbench.stats.power_laws import (
    BOOT_DRAWS,
    BOOT_SEED,
    MIN_SCALING_SIZES,
    SATURATING,
    ScalingFit,
    fit_scaling,
    too_few_sizes_text,
)
from attnbench.store.database import Result, Store
from attnbench.store.provenance import device_name

# fit against: (tag, summary key); parameters without the embeddings (Kaplan et al. 2020)
XS = (("params", "n_params_non_embedding"), ("flops", "train_flops"))
LR_REFERENCE_D_MODEL = 64  # the suite's lr is the rate of a model this wide
BASELINE = "softmax"  # what every variant's exponent is compared against (the report)


def size_lr(lr: float, d_model: int) -> float:
    """The learning rate of a ``d_model``-wide model: ``lr`` x 64 / d_model."""
    return lr * LR_REFERENCE_D_MODEL / d_model


def lr_rule_text(lr: float) -> str:
    return f"lr x {LR_REFERENCE_D_MODEL} / d_model (lr = {lr:g})"


def non_embedding_params(model: nn.Module) -> int:
    """Parameters outside token and position embeddings (a tied LM head is the embedding)."""
    emb = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in emb)


def run_scaling_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    given = cell.spec_as(ScalingSpec)
    spec = given.model_copy(update={"lr": size_lr(given.lr, cell.model.d_model)})
    torch.manual_seed(cell.seed)
    model = build_model(variant, replace(cell, spec=spec.train_spec(1)))
    n_params, n_non_embedding = model.num_params(), non_embedding_params(model)
    del model
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
        "n_params_non_embedding": n_non_embedding,
        "train_flops_per_token": outcome.summary.get("train_flops_per_token", facts["train_flops_per_token"]),
        "budget_rule": spec.budget_rule(),
        "budget": train_spec.budget.model_dump(exclude_none=True),
        "lr": spec.lr,
        "lr_rule": lr_rule_text(given.lr),
    }
    return outcome


def size_groups(runs: list[dict[str, Any]], key: str) -> list[tuple[int, float, list[float]]]:
    """(model index, size x, held-out losses of its finished seeds in seed order) per model
    size with at least one finished seed that recorded ``key``."""
    by_model: dict[int, list[tuple[int, float, float]]] = {}
    for run in runs:
        s = run["summary"]
        x, loss = s.get(key), s.get("val_loss")
        if run["status"] == "done" and x and loss is not None and math.isfinite(loss):
            seed = run.get("seed") or 0
            by_model.setdefault(int(run["coords"].get("model", 0)), []).append((seed, float(x), float(loss)))
    out = []
    for model, rows in sorted(by_model.items()):
        rows.sort()
        out.append((model, sum(x for _, x, _ in rows) / len(rows), [y for _, _, y in rows]))
    return out


def boot_seed(variant: str, x_name: str) -> int:
    """A fixed bootstrap seed per (variant, x): independent draws across variants, the same
    draws on every call (the report recomputes them for comparisons and bands)."""
    return BOOT_SEED + zlib.crc32(f"{variant}/{x_name}".encode()) % 1_000_000


def _fit_or_why(runs: list[dict[str, Any]], key: str, tags: dict[str, Any], seed: int) -> tuple[ScalingFit | None, str]:
    """The fit of ``tags``' sizes and seed losses, or (None, why there is none): too few distinct
    sizes (models of one parameter count are one size), or sizes and losses no law fits."""
    distinct = len(set(tags["sizes"]))
    if distinct < MIN_SCALING_SIZES:
        unrecorded = any(r["status"] == "done" and r["summary"].get(key) is None for r in runs)
        return None, (f"{key} not recorded by every run; " if unrecorded else "") + too_few_sizes_text(distinct)
    try:
        return fit_scaling(tags["sizes"], tags["seed_losses"], seed=seed, draws=BOOT_DRAWS), ""
    except ValueError as exc:  # stored as why there is no fit, never raised at the end of a run
        return None, f"no fit: {exc}"


def power_law_rows(runs: list[dict[str, Any]], variant: str = "", margin: float | None = None) -> list[Result]:
    """One "power_law" row per x: both laws, the supported one's b (the row's value) and c
    with bootstrap intervals, residuals and the lack-of-fit test; or why there is no fit."""
    rows = []
    for x_name, key in XS:
        groups = size_groups(runs, key)
        tags: dict[str, Any] = {
            "x": x_name,
            "x_key": key,
            "n_points": len(groups),
            "models": [m for m, _, _ in groups],
            "sizes": [x for _, x, _ in groups],
            "losses": [sum(g) / len(g) for _, _, g in groups],
            "seed_losses": [g for _, _, g in groups],
            "baseline": BASELINE,
            "exponent_margin": margin,
        }
        fit, error = _fit_or_why(runs, key, tags, boot_seed(variant, x_name))
        if fit is None:
            rows.append(Result("power_law", None, "", {**tags, "law": None, "b": None, "c": None, "error": error}))
            continue
        seed = boot_seed(variant, x_name)
        a, b, c, sse = (float(v) for v in fit.params())
        resid = fit.residuals()
        tags |= {
            "law": fit.law,
            "a": a,
            "b": b,
            "c": c if fit.law == SATURATING else None,
            "b_ci95": list(fit.ci("b")),
            "c_ci95": list(fit.ci("c")) if fit.law == SATURATING else None,
            "laws": {law: dict(zip(("a", "b", "c", "sse"), map(float, p), strict=True)) for law, p in fit.fits.items()},
            "f_p": fit.f_p,
            "lof_p": fit.lof_p,
            "lof_f": fit.lof_f,
            "inflation": fit.inflation,  # > 1: the law misses sizes; intervals carry the misfit
            "residuals": [float(r) for r in resid],
            "rmse": math.sqrt(float((resid**2).mean())),
            "boot_seed": seed,
            "boot_draws": BOOT_DRAWS,
            "error": None,
        }
        rows.append(Result("power_law", b, "", tags))
    return rows


def finalize_scaling(cells: list[Cell], store: Store, device: torch.device) -> None:
    """Store one "scaling_fit" run per variant of the experiment (idempotent)."""
    if not cells:
        return
    first = cells[0]
    margin = getattr(first.spec, "exponent_margin", None)  # a suite setting once ScalingSpec declares it
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
            "exponent_margin": margin,
            "code": code_hash(
                "attnbench.stats.power_laws", "attnbench.stats.intervals", "attnbench.experiments.scaling"
            ),
        }
        save_derived(
            store,
            kind="scaling_fit",
            suite=first.suite,
            experiment=first.experiment,
            variant=variant,
            inputs=inputs,
            device=device,
            results=power_law_rows(vruns, variant, margin),
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
        "attnbench.stats.power_laws",
        "attnbench.stats.intervals",
    ),
    finalize=finalize_scaling,
    data_parallel=True,
)
