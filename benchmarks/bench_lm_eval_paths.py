"""The two lm-eval paths on one trained checkpoint, side by side: attnbench's own ``LM``
(``--model attnbench``, ``experiments.lm_eval.model.AttnbenchLM``) and lm-eval's ``HFLM`` over the
Hugging Face export, built in memory (``AutoModelForCausalLM.from_pretrained`` of the exported
folder, handed to HFLM as a model object with its tokenizer). Both score the same local tasks
(held-out text: rolling log-likelihood; recall: multiple choice) with the same batch size;
the runs alternate, several repeats, so load on a shared machine falls on both alike.

    python benchmarks/bench_lm_eval_paths.py --steps 100 --repeats 3 --limit 100

Prints per task and metric both values and their difference, the largest per-document
log-likelihood difference, and each path's wall times (median of the repeats; model set-up apart).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SUITE = """
version: 1
name: bench-lm-eval-paths
defaults:
  model: {{d_model: {d_model}, n_layer: 2, n_head: 2, context: {context}}}
experiments:
  - name: train
    kind: train
    variants: [{variant}]
    data: {{source: stdlib, max_bytes: 1000000}}
    train: {{budget: {{steps: {steps}}}, batch_size: 8, seq_len: 128, lr: 3.0e-3, warmup_steps: 10,
            eval_interval: 1000, eval_tokens: 4096}}
"""
TASKS = ["attnbench_heldout_text", "attnbench_recall"]


def trained_checkpoint(tmp: Path, args: argparse.Namespace) -> Path:
    """A checkpoint of one briefly trained cell, through ``run_suite`` into a temporary store."""
    from attnbench.nn.checkpoint import run_checkpoint
    from attnbench.plan.suite import load_suite
    from attnbench.registry.loader import load_registry
    from attnbench.run.runner import run_suite
    from attnbench.store.database import Store

    suite_path = tmp / "suite.yaml"
    suite_path.write_text(SUITE.format(variant=args.variant, steps=args.steps, d_model=args.d_model, context=256))
    with Store(tmp / "store.sqlite") as store:
        run_suite(load_suite(suite_path), store, load_registry(), device="cpu", out=io.StringIO())
        (run,) = [r for r in store.runs() if r["kind"] == "train"]
        return run_checkpoint(store, run)


def build_paths(checkpoint: Path, tmp: Path, batch_size: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Both lm-eval models of ``checkpoint`` and the seconds each took to build."""
    from lm_eval.models.huggingface import HFLM
    from transformers.models.auto.modeling_auto import AutoModelForCausalLM
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    from attnbench.experiments.lm_eval.model import AttnbenchLM
    from attnbench.export.writer import export_checkpoint
    from attnbench.registry.loader import load_registry

    setup: dict[str, float] = {}
    started = time.perf_counter()
    custom = AttnbenchLM(checkpoint=str(checkpoint), device="cpu", batch_size=batch_size)
    setup["attnbench"] = time.perf_counter() - started
    started = time.perf_counter()
    export_checkpoint(checkpoint, tmp / "export", load_registry(), overwrite=True)
    model = AutoModelForCausalLM.from_pretrained(str(tmp / "export"), trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tmp / "export"), trust_remote_code=True)
    # lm-eval's untyped register_model decorator hides HFLM's own signature from the checker.
    hf_args = {"pretrained": model, "tokenizer": tokenizer, "batch_size": batch_size, "device": "cpu"}
    hf = HFLM(**hf_args)
    setup["hf"] = time.perf_counter() - started
    return {"attnbench": custom, "hf": hf}, setup


def evaluate(lm: Any, limit: int | None, text_path: Path) -> tuple[dict[str, Any], dict[tuple, float], float, float]:
    """(results per task, log-likelihood per (task, document, choice), seconds in the model's
    scoring calls, wall seconds of the whole lm-eval run) of one run."""
    from lm_eval.evaluator import simple_evaluate

    from attnbench.experiments.lm_eval.evaluate import task_manager

    scoring = [0.0]
    for method in ("loglikelihood", "loglikelihood_rolling"):
        call = getattr(type(lm), method)

        def timed(requests: Any, disable_tqdm: bool = False, _call: Any = call) -> Any:
            started = time.perf_counter()
            try:
                return _call(lm, requests, disable_tqdm=disable_tqdm)
            finally:
                scoring[0] += time.perf_counter() - started

        setattr(lm, method, timed)
    metadata = {"text_path": str(text_path), "n_docs": 200}
    started = time.perf_counter()
    out = simple_evaluate(
        model=lm,
        tasks=list(TASKS),
        task_manager=task_manager([str(text_path.parent)], TASKS, metadata),
        limit=limit,
        bootstrap_iters=0,
        log_samples=True,
    )
    wall = time.perf_counter() - started
    results: dict[str, Any] = dict(out or {})
    logliks: dict[tuple, float] = {}
    for task, samples in results["samples"].items():
        for sample in samples:
            for c, resp in enumerate(sample["resps"]):
                value = resp[0]
                logliks[(task, sample["doc_id"], c)] = float(value[0] if isinstance(value, tuple | list) else value)
    return results["results"], logliks, scoring[0], wall


def report(runs: dict[str, list], setup: dict[str, float], args: argparse.Namespace) -> None:
    """Both paths' figures, side by side."""
    (a_res, a_ll, _, _), (h_res, h_ll, _, _) = runs["attnbench"][0], runs["hf"][0]
    print(
        f"checkpoint: {args.variant}, d_model {args.d_model} x 2 layers, {args.steps} steps; "
        f"batch size {args.batch_size}, limit {args.limit or 'none'}, {args.repeats} repeats, CPU"
    )
    print(f"{'task':<24} {'metric':<22} {'attnbench':>14} {'hf (in memory)':>14} {'difference':>11}")
    for task in TASKS:
        for key, value in sorted(a_res[task].items()):
            other = h_res[task].get(key)
            if isinstance(value, float) and isinstance(other, float):
                print(f"{task:<24} {key:<22} {value:>14.6f} {other:>14.6f} {other - value:>+11.2e}")
    common = a_ll.keys() & h_ll.keys()
    worst = max((abs(a_ll[k] - h_ll[k]) for k in common), default=float("nan"))
    print(
        f"log-likelihoods compared: {len(common)} (attnbench {len(a_ll)}, hf {len(h_ll)}); "
        f"largest difference {worst:.2e} nats"
    )
    print(f"{'path':<12} {'set-up s':>9} {'scoring s (median; each)':>40} {'lm-eval run s (median; each)':>40}")
    for path, rs in runs.items():
        scoring, wall = [r[2] for r in rs], [r[3] for r in rs]
        each_s = ", ".join(f"{x:.2f}" for x in scoring)
        each_w = ", ".join(f"{x:.2f}" for x in wall)
        print(
            f"{path:<12} {setup[path]:>9.2f} {statistics.median(scoring):>8.2f} ({each_s}) "
            f"{statistics.median(wall):>8.2f} ({each_w})"
        )
    ratio = statistics.median(r[2] for r in runs["hf"]) / statistics.median(r[2] for r in runs["attnbench"])
    print(f"hf / attnbench scoring time: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="softmax")
    parser.add_argument("--steps", type=int, default=100, help="training steps of the checkpoint")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--limit", type=int, default=100, help="documents per task (0: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-lm-eval-") as name:
        tmp = Path(name)
        checkpoint = trained_checkpoint(tmp, args)
        lms, setup = build_paths(checkpoint, tmp, args.batch_size)
        text_path = Path(__file__).resolve().parents[1] / "suites" / "lm_eval_tasks" / "heldout_python.txt"
        runs: dict[str, list] = {path: [] for path in lms}
        for r in range(args.repeats):  # alternating order: load on a shared machine falls on both
            for path in list(lms) if r % 2 == 0 else list(reversed(list(lms))):
                runs[path].append(evaluate(lms[path], args.limit or None, text_path))
        report(runs, setup, args)


if __name__ == "__main__":
    main()
