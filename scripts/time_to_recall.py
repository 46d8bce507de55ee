"""Time to learn recall, per train run of a suite: the recall sweep's table (issue 40).

    python scripts/time_to_recall.py STORE --suite recall-sweep [--threshold 0.9]

For each finished train run: the first evaluated step whose validation accuracy (the mean over
the experiment's evaluation settings, the ``val/accuracy`` curve) reaches the threshold, the
tokens and training seconds (wall, as the run recorded them) at that step, or ``>N`` (censored
at the run's budget) where it never did; the best validation accuracy; the final test accuracy
per number of pairs. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, cast

import pandas as pd

from attnbench.report.load import load_store
from attnbench.report.time_to_learn import first_at_target


def _pairs(tags: dict[str, Any]) -> Any:
    return tags.get("num_kv_pairs", tags.get("n_pairs", "-"))


def time_to_recall(store: Path, suite: str, threshold: float) -> pd.DataFrame:
    """One row per finished train run: experiment, variant, seed, steps, to_threshold, tokens,
    train_s (at the threshold, else the budget's), best_val, test (accuracy per number of pairs)."""
    data = load_store(store, suite)
    runs = data.runs[(data.runs["kind"] == "train") & (data.runs["status"] == "done")]
    rows = []
    for run in runs.itertuples():
        summary = cast(dict[str, Any], run.summary)  # a decoded JSON object
        curve = data.metrics[(data.metrics["run_id"] == run.id) & (data.metrics["name"] == "val/accuracy")]
        hit = first_at_target(curve, threshold)
        steps = int(summary.get("steps", 0))
        res = data.results[(data.results["run_id"] == run.id) & (data.results["name"] == "accuracy")]
        test = {_pairs(t): v for t, v in zip(res["tags"], res["value"], strict=True) if t.get("split") == "test"}
        rows.append(
            {
                "experiment": run.experiment,
                "variant": run.variant,
                "seed": run.seed,
                "steps": steps,
                "to_threshold": str(int(hit["step"])) if hit is not None else f">{steps}",
                "tokens": int(hit["tokens"]) if hit is not None else int(summary.get("tokens", 0)),
                "train_s": float(hit["elapsed_s"]) if hit is not None else float(summary.get("train_time_s", 0)),
                "best_val": float(curve["value"].max()) if not curve.empty else float("nan"),
                "test": " ".join(f"{k}:{test[k]:.2f}" for k in sorted(test, key=lambda k: (str(type(k)), k))),
            }
        )
    return pd.DataFrame(rows).sort_values(["experiment", "variant", "seed"]) if rows else pd.DataFrame()


def markdown(table: pd.DataFrame) -> str:
    """``table`` as a Markdown table (numbers to 3 significant figures)."""

    def cell(v: object) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="Steps to a recall threshold per train run of a suite (Markdown table).")
    ap.add_argument("store", type=Path)
    ap.add_argument("--suite", default="recall-sweep")
    ap.add_argument("--threshold", type=float, default=0.9)
    args = ap.parse_args()
    table = time_to_recall(args.store, args.suite, args.threshold)
    if table.empty:
        raise SystemExit(f"{args.store}: no finished train runs of suite {args.suite}")
    print(markdown(table))


if __name__ == "__main__":
    main()
