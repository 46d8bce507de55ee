"""`lm_eval` experiments: lm-eval tasks on the checkpoints of a train experiment.

Cells. ``link_lm_eval_cells`` (the kind's ``link``, called by ``expand_suite``) pairs each lm_eval cell with
the cell of ``from_experiment`` that has its variant, model size and seed (one lm_eval
cell per matching trained cell, every grid point of it), takes that cell's model config,
makes the spec's paths absolute against the suite file, and folds the trained cell's key,
the task files and lm-eval's version into the lm_eval cell's key: re-training a cell, or
editing a task, re-evaluates it; nothing else does. Where ``from_experiment`` tunes
(protocol.tuning), the cells read are the chosen point's final cells, linked as the tuner plans
them (plan/after_tuning.py).

Running. Each cell evaluates in a child Python process (``python -m attnbench.experiments.lm_eval.evaluate
REQUEST.json``): lm-eval sets global seeds and logging, and the hub's offline switches
(HF_DATASETS_OFFLINE / HF_HUB_OFFLINE) are read when ``datasets`` is imported, so they can
only be set reliably for a fresh process.

Rows. One result per (task, metric): name = the metric, value, unit, and tags ``task``,
``metric``, ``filter``, ``stderr``, ``version``, ``n_samples``, ``higher_is_better``,
``train_run_id``, ``train_cell_key`` (join with ``runs.cell_key`` of the training run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata as md
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnbench.contract.variant import Variant
from attnbench.experiments.base import COMMON_CODE, CellOutcome, Kind, RunContext, trained_run
from attnbench.plan.after_tuning import as_template, final_cells_for, template_error, tuned_source
from attnbench.plan.cells import Cell, no_trained_cell_text, trained_cells_for
from attnbench.plan.downstream_spec import LmEvalSpec
from attnbench.plan.suite import Suite, suite_error_at
from attnbench.store.database import Result
from attnbench.store.provenance import content_key

_UNITS = {"bits_per_byte": "bits/byte"}


# -- cells ------------------------------------------------------------------------------
def _lm_eval_version() -> str:
    try:
        return md.version("lm_eval")
    except md.PackageNotFoundError:
        return "not installed"


def _inputs_hash(folders: str | list[str] | None, paths: dict[str, str]) -> str:
    """sha256 over what the tasks read: task definitions (YAML and Python files) under the
    include folders, files named in ``paths``, (the harness code lm-eval runs is
    in the cell key through the kind's ``code``)."""
    h = hashlib.sha256()
    for name, value in sorted(paths.items()):
        if Path(value).is_file():
            h.update(name.encode() + b"\0" + Path(value).read_bytes())
    for folder in [folders] if isinstance(folders, str) else folders or []:
        root = Path(folder)
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml", ".py") and p.is_file()):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _source_error(suite: Suite, ei: int, src: str) -> str | None:
    exps = {e.name: e for e in suite.experiments}
    if src not in exps:
        return f"no experiment named {src!r} in this suite; experiments: {sorted(exps)}"
    spec = exps[src].spec()
    if not getattr(spec, "checkpoint", False):
        return (
            f"experiment {src!r} (kind {exps[src].kind}) keeps no checkpoints; name a train "
            "experiment whose train.checkpoint is true"
        )
    return None


def _check_paths(suite: Suite, ei: int, spec: LmEvalSpec) -> None:
    """Every task folder and file the (resolved) spec names exists."""
    for folder in spec.include_path or []:
        if not Path(folder).is_dir():
            raise suite_error_at(
                suite,
                ("experiments", ei, "lm_eval", "include_path"),
                f"task folder {folder} does not exist (paths are relative to the suite file)",
            )
    for name, value in spec.paths.items():
        if not Path(value).exists():
            raise suite_error_at(
                suite,
                ("experiments", ei, "lm_eval", "paths", name),
                f"file {value} does not exist (paths are relative to the suite file)",
            )


def _trained(suite: Suite, ei: int, cell: Cell, src: str, cells: list[Cell]) -> tuple[list[Cell], list[Cell]]:
    """(the trained cells ``cell`` evaluates now, [``cell`` as a template] where its source tunes
    and so plans more of them later: plan/after_tuning.py). SuiteError where it can read none."""
    tuned = tuned_source(suite, src)
    if tuned is not None:
        if (why := template_error(cell, tuned, cells)) is not None:
            raise suite_error_at(suite, ("experiments", ei), why)
        return final_cells_for(cell, src, cells), [as_template(cell, src)]
    matches = trained_cells_for(cell, src, cells)
    if not matches:
        raise suite_error_at(suite, ("experiments", ei), no_trained_cell_text(cell, src))
    return matches, []


def _link(cell: Cell, trained: Cell, spec: Any, tasks_hash: str) -> Cell:
    linked = dataclasses.replace(
        cell,
        model=trained.model,
        spec=spec,
        key="",
        key_inputs={},
        # the trained cell's coordinates but its stage: the tuner plans the train experiment's stages alone
        coords={**{k: v for k, v in trained.coords.items() if k != "stage"}, "from_experiment": trained.experiment},
    )
    if not cell.key:  # keys are not computed (``attnbench validate``)
        return linked
    inputs = {
        **cell.key_inputs,
        "config": linked.config_dict(),
        "train_cell_key": trained.key,
        "lm_eval": {"version": _lm_eval_version(), "inputs_sha256": tasks_hash},
    }
    return dataclasses.replace(linked, key=content_key(inputs), key_inputs=inputs)


def link_lm_eval_cells(suite: Suite, cells: list[Cell]) -> list[Cell]:
    """Replace each lm_eval cell by one cell per trained cell it evaluates (see the module
    docstring); lm_eval cells go last so their checkpoints exist when they run. A cell whose
    source tunes stays as a template and is linked to the source's final cells planned so far
    (plan/after_tuning.py): call again as more are planned. Raises SuiteError naming the
    experiment when it can match no trained cell. Idempotent."""
    if not any(c.kind == "lm_eval" and "from_experiment" not in c.coords for c in cells):
        return cells
    base = suite.path.parent if suite.path else Path.cwd()
    index = {e.name: i for i, e in enumerate(suite.experiments)}
    hashes: dict[str, str] = {}
    out = [c for c in cells if c.kind != "lm_eval"]
    linked = [c for c in cells if c.kind == "lm_eval" and "from_experiment" in c.coords]
    seen = {_identity(c) for c in linked}
    out += linked
    for cell in cells:
        if cell.kind != "lm_eval" or "from_experiment" in cell.coords:
            continue
        ei, src = index[cell.experiment], cell.spec_as(LmEvalSpec).from_experiment
        problem = _source_error(suite, ei, src)
        if problem:
            raise suite_error_at(suite, ("experiments", ei, "lm_eval", "from_experiment"), problem)
        spec = cell.spec_as(LmEvalSpec).resolved(base)
        _check_paths(suite, ei, spec)
        matches, templates = _trained(suite, ei, cell, src, cells)
        out += templates
        key = json.dumps([spec.include_path, spec.paths])
        if key not in hashes and cell.key and matches:
            hashes[key] = _inputs_hash(spec.include_path, spec.paths)
        for t in matches:
            new = _link(cell, t, spec, hashes.get(key, ""))
            if _identity(new) not in seen:
                seen.add(_identity(new))
                out.append(new)
    return out


def _identity(cell: Cell) -> tuple[str, str]:
    """What makes a linked cell the same one: its key, or (unkeyed, at validate) the cell it reads."""
    return cell.experiment, cell.key or repr(sorted(cell.coords.items()))


# -- running ----------------------------------------------------------------------------
def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def result_rows(results: dict[str, Any], train_run: dict[str, Any]) -> list[Result]:
    """lm-eval's results dict -> one store row per (task, metric, filter)."""
    rows = []
    for task, metrics in results.get("results", {}).items():
        n = (results.get("n-samples", {}).get(task) or {}).get("effective")
        better = results.get("higher_is_better", {}).get(task, {})
        for key, value in metrics.items():
            if "," not in key or "_stderr," in key:
                continue
            metric, filt = key.split(",", 1)
            rows.append(
                Result(
                    metric,
                    _num(value),
                    _UNITS.get(metric, ""),
                    {
                        "task": task,
                        "metric": metric,
                        "filter": filt,
                        "stderr": _num(metrics.get(f"{metric}_stderr,{filt}")),
                        "version": results.get("versions", {}).get(task),
                        "n_samples": n,
                        "higher_is_better": better.get(metric),
                        "train_run_id": train_run["id"],
                        "train_cell_key": train_run["cell_key"],
                    },
                )
            )
    return rows


def _child_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    mine = [ln for ln in lines if ln.startswith("attnbench: error: ")]
    if mine:
        return mine[-1].removeprefix("attnbench: error: ")
    return f"lm-eval exited with status {proc.returncode}: " + " | ".join(lines[-8:])


def child_env(offline: bool) -> dict[str, str]:
    env = dict(os.environ)
    if offline:
        env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _hf_export(ctx: RunContext, checkpoint: Path, train: dict[str, Any]) -> str:
    """The Hugging Face export of a trained cell's checkpoint, in the store's exports/ folder
    (written once per trained cell: its key names the folder)."""
    from attnbench.export.writer import export_checkpoint
    from attnbench.registry.loader import load_registry

    out = Path(ctx.store.path).parent / "exports" / train["cell_key"]
    if not (out / "config.json").is_file():
        export_checkpoint(checkpoint, out, ctx.registry or load_registry(), overwrite=True)
    return str(out)


def _request(
    spec: LmEvalSpec, ctx: RunContext, checkpoint: Path, hf_export: str | None, output: Path
) -> dict[str, Any]:
    """What the lm-eval child process reads: the checkpoint (or export) and lm-eval's settings."""
    return {
        "checkpoint": str(checkpoint),
        "device": str(ctx.device),
        "tasks": spec.tasks,
        "include_path": spec.include_path,
        "metadata": {**spec.metadata, **spec.paths},
        "limit": spec.limit,
        "num_fewshot": spec.num_fewshot,
        "batch_size": spec.batch_size,
        "bootstrap_iters": spec.bootstrap_iters,
        "offline": spec.offline,
        "hf_export": hf_export,
        "truncate": spec.truncate,
        "output": str(output),
    }


def run_lm_eval_cell(cell: Cell, variant: Variant, ctx: RunContext) -> CellOutcome:
    from attnbench.errors import AttnbenchError
    from attnbench.nn.checkpoint import run_checkpoint

    if "train_cell_key" not in cell.key_inputs:
        return CellOutcome(
            "failed",
            error="lm_eval cell is not linked to a trained cell: "
            "expand_suite must pass its cells through link_lm_eval_cells",
        )
    spec = cell.spec_as(LmEvalSpec)
    train = trained_run(ctx, cell, "evaluate")
    if isinstance(train, CellOutcome):
        return train
    try:
        checkpoint = run_checkpoint(ctx.store, train)
        hf_export = _hf_export(ctx, checkpoint, train) if spec.model == "hf" else None
    except AttnbenchError as exc:
        return CellOutcome("failed", error=str(exc))
    with tempfile.TemporaryDirectory(prefix="attnbench-lm-eval-") as tmp:
        request = _request(spec, ctx, checkpoint, hf_export, Path(tmp) / "results.json")
        (Path(tmp) / "request.json").write_text(json.dumps(request))
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "attnbench.experiments.lm_eval.evaluate", str(Path(tmp) / "request.json")],
            capture_output=True,
            text=True,
            env=child_env(spec.offline),
        )
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            return CellOutcome("failed", error=_child_error(proc))
        results = json.loads(Path(request["output"]).read_text())
    rows = result_rows(results, train)
    summary = {
        "train_run_id": train["id"],
        "train_cell_key": train["cell_key"],
        "checkpoint": str(checkpoint),
        "tasks": spec.tasks,
        "limit": spec.limit,
        "eval_time_s": elapsed,
        "model": spec.model,
        "hf_export": hf_export,
        "lm_eval_version": _lm_eval_version(),
        "versions": results.get("versions", {}),
        "truncated": (results.get("config") or {}).get("attnbench", {}).get("truncated", {}),
        **{f"{r.tags['task']}/{r.name}": r.value for r in rows},
    }
    return CellOutcome("done", summary, results=rows)


KIND = Kind(
    "lm_eval",
    run_lm_eval_cell,
    code=(*COMMON_CODE, "attnbench.experiments.lm_eval", "attnbench.export"),
    on_driver=True,
)
