"""Evaluating one checkpoint with lm-eval, in-process; also the child-process entry point
of `lm_eval` suite cells (``python -m attnbench.experiments.lm_eval.evaluate REQUEST.json``).

Task lookup indexes only the ``include_path`` folders when every requested task is there
(``TaskManager(include_defaults=False)``: no scan of lm-eval's thousands of built-in
tasks); a task that is not found there makes lm-eval index its built-in tasks as well.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

from attnbench.errors import AttnbenchError

log = logging.getLogger(__name__)
_KEEP = ("results", "versions", "n-samples", "higher_is_better", "config")
OFFLINE_HINT = (
    " The suite sets lm_eval.offline: true, so the Hugging Face hub is not contacted: a task "
    "whose data is not local cannot load. Use local tasks (include_path) or set offline: false."
)


def task_manager(include_path: list[str] | None, tasks: list[str], metadata: dict[str, Any]) -> Any:
    """A TaskManager that knows the requested tasks, indexing built-in tasks only if needed."""
    from lm_eval.tasks import TaskManager

    paths: list[str | Path] | None = list(include_path) if include_path else None
    if paths:
        local = TaskManager(include_path=paths, include_defaults=False, metadata=metadata)
        missing = [t for t in tasks if t not in local.all_tasks]
        if not missing:
            return local
        log.info("tasks %s are not in %s; indexing lm-eval's built-in tasks", missing, include_path)
    return TaskManager(include_path=paths, include_defaults=True, metadata=metadata)


def evaluate_checkpoint(
    checkpoint: str,
    tasks: list[str],
    *,
    include_path: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    device: str | None = None,
    batch_size: int = 16,
    limit: int | float | None = None,
    num_fewshot: int | None = None,
    bootstrap_iters: int = 1000,
    lm: Any = None,
    hf_export: str | None = None,
    truncate: str | None = None,
) -> dict[str, Any]:
    """lm-eval's results for one checkpoint (or an ``AttnbenchLM`` given as ``lm``, or an
    exported folder ``hf_export`` scored by lm-eval's own ``hf`` model): the ``results``,
    ``versions``, ``n-samples``, ``higher_is_better`` and ``config`` entries."""
    from lm_eval.evaluator import simple_evaluate

    from attnbench.experiments.lm_eval.model import AttnbenchLM

    if lm is None and hf_export:
        from lm_eval.models.huggingface import HFLM

        # lm-eval's untyped register_model decorator hides HFLM's own signature from the checker.
        hf_args = {
            "pretrained": hf_export,
            "trust_remote_code": True,
            "device": device or "cpu",
            "batch_size": batch_size,
        }
        lm = HFLM(**hf_args)
    elif lm is None:
        lm = AttnbenchLM(checkpoint=checkpoint, device=device, batch_size=batch_size, truncate=truncate)
    manager = task_manager(include_path, tasks, dict(metadata or {}))
    out = simple_evaluate(
        model=lm,
        tasks=list(tasks),
        task_manager=manager,
        limit=limit,
        num_fewshot=num_fewshot,
        bootstrap_iters=bootstrap_iters,
        log_samples=False,
    )
    if out is None:  # lm-eval returns results on the main process only; this is the main process
        raise RuntimeError("lm-eval returned no results")
    results = dict(out)
    return {k: results[k] for k in _KEEP if k in results}


def child_main(argv: list[str]) -> int:
    """Read a request (JSON), evaluate, write the results to ``request["output"]``.
    The last stderr line of a failure is ``attnbench: error: <what to fix>``."""
    request = json.loads(Path(argv[0]).read_text())
    offline_hint = OFFLINE_HINT if request.get("offline") else ""
    try:
        results = evaluate_checkpoint(
            request["checkpoint"],
            request["tasks"],
            include_path=request.get("include_path"),
            metadata=request.get("metadata"),
            device=request.get("device"),
            batch_size=request.get("batch_size", 16),
            limit=request.get("limit"),
            num_fewshot=request.get("num_fewshot"),
            bootstrap_iters=request.get("bootstrap_iters", 1000),
            hf_export=request.get("hf_export"),
            truncate=request.get("truncate"),
        )
    except AttnbenchError as exc:
        print(f"attnbench: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # lm-eval and datasets raise many types; report what and why
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0]
        print(
            f"attnbench: error: lm-eval failed on tasks {request['tasks']}: "
            f"{type(exc).__name__}: {first}.{offline_hint}",
            file=sys.stderr,
        )
        return 1
    Path(request["output"]).write_text(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
