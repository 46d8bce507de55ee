"""Recall against state size (Zoology's and Based's signature figure) from a results store.

    python scripts/recall_vs_state.py STORE --suite mqar-anchor --experiment recall-vs-state --out FIG.png

One panel per number of key-value pairs K (the experiment's ``eval_settings``): each variant's
answer accuracy (its test rows, else its validation rows; mean over seeds) against the elements its decode state
holds after T tokens (the ``state_elements`` each run records: the KV cache for softmax, the
fixed state for the recurrent mixers, the sum over layers for a hybrid), log scale. Prints
the table it draws, so the figure's numbers can be quoted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from attnbench.report.load import load_store  # noqa: E402


def recall_table(store: Path, suite: str, experiment: str, lr: float | None = None) -> pd.DataFrame:
    """variant, K, accuracy (mean over seeds), seeds, state_elements: one row per variant and K,
    from the test rows where the experiment has them, else the validation rows. An experiment
    with a learning-rate grid needs ``lr`` (one grid point per figure)."""
    data = load_store(store, suite)
    runs = data.runs[(data.runs["experiment"] == experiment) & (data.runs["status"] == "done")]
    if runs.empty:
        raise SystemExit(f"{store}: no finished runs of {suite}/{experiment}")
    lrs = sorted({c.get("lr") for c in runs["coords"] if c.get("lr") is not None})
    if lr is None and len(lrs) > 1:
        raise SystemExit(f"{suite}/{experiment} has a learning-rate grid {lrs}: choose one with --lr")
    if lr is not None:
        runs = runs[[c.get("lr") == lr for c in runs["coords"]]]
        if runs.empty:
            raise SystemExit(f"{suite}/{experiment} has no runs at lr {lr}; its grid: {lrs}")
    ids = set(runs["id"].astype(int))
    splits = {t.get("split") for rid, t in zip(data.results["run_id"], data.results["tags"], strict=True) if rid in ids}
    split = "test" if "test" in splits else "val"
    state = {int(r["id"]): r["summary"].get("state_elements") for _, r in runs.iterrows()}
    variant = {int(r["id"]): str(r["variant"]) for _, r in runs.iterrows()}
    rows = []
    for _, r in data.results[data.results["run_id"].isin(list(state))].iterrows():
        tags = r["tags"]
        if r["name"] == "accuracy" and tags.get("split") == split and "num_kv_pairs" in tags:
            run = int(r["run_id"])
            rows.append((variant[run], int(tags["num_kv_pairs"]), float(r["value"]), state[run]))
    frame = pd.DataFrame(rows, columns=["variant", "K", "accuracy", "state_elements"])
    return (
        frame.groupby(["variant", "K"], as_index=False)
        .agg(accuracy=("accuracy", "mean"), seeds=("accuracy", "size"), state_elements=("state_elements", "first"))
        .sort_values(["K", "state_elements"])
    )


def draw(table: pd.DataFrame, title: str, out: Path) -> None:
    ks = sorted(table["K"].unique())
    variants = sorted(table["variant"].unique())
    cmap = plt.get_cmap("tab10" if len(variants) <= 10 else "tab20")
    colours = {v: cmap(i) for i, v in enumerate(variants)}
    fig, axes = plt.subplots(1, len(ks), figsize=(3.2 * len(ks), 3.4), sharey=True, constrained_layout=True)
    axes = list(axes) if len(ks) > 1 else [axes]  # one panel comes back bare
    for ax, k in zip(axes, ks, strict=True):
        sub = table[table["K"] == k]
        for _, r in sub.iterrows():
            ax.scatter(r["state_elements"], r["accuracy"], color=colours[r["variant"]], s=36, label=r["variant"])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: the minor labels overlap
        ax.set_title(f"K = {k} pairs")
        ax.set_xlabel("decode state (elements)")
        ax.axhline(1 / k, color="grey", lw=0.8, ls=":")  # guessing one of the K in-context values
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MQAR answer accuracy")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Recall against state size, from a results store.")
    ap.add_argument("store", type=Path)
    ap.add_argument("--suite", default="mqar-anchor")
    ap.add_argument("--experiment", default="recall-vs-state")
    ap.add_argument("--lr", type=float, help="the grid point to draw, where the experiment has a learning-rate grid")
    ap.add_argument("--out", type=Path, default=Path("recall-vs-state.png"))
    args = ap.parse_args(argv)
    table = recall_table(args.store, args.suite, args.experiment, args.lr)
    print(table.to_string(index=False))
    draw(table, f"{args.suite} / {args.experiment}: recall against state size (dotted: 1/K)", args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
