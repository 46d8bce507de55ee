"""The experiment kinds, by name: a table of "module:attribute" imported on first use, so
a new kind is one new module plus one line here, and no core module imports a kind."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from attnbench.data.spec import DataSpec
from attnbench.errors import SuiteError
from attnbench.experiments.base import Kind
from attnbench.plan.cells import Cell, expand
from attnbench.plan.suite import Suite
from attnbench.plan.validation import CheckedSuite, check_suite
from attnbench.registry.identity import code_hash
from attnbench.registry.loader import Registry

KIND_TABLE: dict[str, str] = {
    "train": "attnbench.experiments.train.cell:KIND",
    "speed": "attnbench.experiments.speed.cell:KIND",
    "scaling": "attnbench.experiments.scaling:KIND",
    "lm_eval": "attnbench.experiments.lm_eval.cell:KIND",
    "finetune": "attnbench.experiments.finetune.cell:KIND",
}
# The kinds whose expanded cells are paired with the cells they read ((suite, cells) -> cells,
# idempotent): apart from the kinds, whose modules load torch, so a suite validates without it.
LINK_TABLE: dict[str, str] = {
    "lm_eval": "attnbench.experiments.lm_eval.cell:link_lm_eval_cells",
    "finetune": "attnbench.experiments.finetune.link:link_finetune_cells",
}


def _attribute(reference: str) -> Any:
    module, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module), attr)


@functools.cache
def get_kind(name: str) -> Kind:
    if name not in KIND_TABLE:
        raise SuiteError(f"unknown experiment kind {name!r}; kinds: {sorted(KIND_TABLE)}")
    return _attribute(KIND_TABLE[name])


@functools.cache
def kind_code_hash(name: str) -> str:
    """Content hash of the harness code a kind's cells run (part of their keys)."""
    return code_hash(*get_kind(name).code)


def expand_suite(
    suite: Suite,
    registry: Registry,
    *,
    device: str = "",
    only_variants: list[str] | None = None,
    corpus_hash: Callable[[DataSpec], str] | None = None,
    build: bool | None = None,
) -> list[Cell]:
    """Every cell of a suite, once the suite is checked whole against ``registry`` (one
    SuiteError listing every problem; with ``build`` not None its model sizes too:
    plan/validation.py), keyed (when ``corpus_hash`` is given; each data set is hashed once)
    and linked by its kind."""
    hashed = _once(corpus_hash) if corpus_hash else None
    checked = check_suite(suite, registry, only_variants=only_variants, corpus_hash=hashed, build=build)
    return expand_checked(checked, device=device, keyed=corpus_hash is not None)


def expand_checked(checked: CheckedSuite, *, device: str = "", keyed: bool = False) -> list[Cell]:
    """The cells of a checked suite, keyed when ``keyed`` (by the corpus hashes the check read),
    and linked by their kinds."""
    cells = expand(checked, device=device, kind_code=kind_code_hash if keyed else None)
    return link_cells(checked.suite, cells)


def _once(corpus_hash: Callable[[DataSpec], str]) -> Callable[[DataSpec], str]:
    """``corpus_hash``, computed once per data spec."""
    known: dict[str, str] = {}

    def hashed(spec: DataSpec) -> str:
        key = spec.model_dump_json()
        if key not in known:
            known[key] = corpus_hash(spec)
        return known[key]

    return hashed


def link_cells(suite: Suite, cells: list[Cell]) -> list[Cell]:
    """``cells`` with each kind's cells paired with the cells they read (idempotent)."""
    for name in dict.fromkeys(c.kind for c in cells):
        if name in LINK_TABLE:
            cells = _attribute(LINK_TABLE[name])(suite, cells)
    return cells


def newly_linked(suite: Suite, cells: list[Cell]) -> list[Cell]:
    """The cells the kinds link now that ``cells`` holds more trained cells (a tuned
    experiment's final cells, read by cells planned as templates: plan/after_tuning.py)."""
    known = {c.key for c in cells}
    return [c for c in link_cells(suite, cells) if c.key not in known]


def kinds() -> dict[str, Any]:
    return {name: get_kind(name) for name in KIND_TABLE}
