"""Recall against state size (Zoology's and Based's signature figure) from a results store.

    python scripts/recall_vs_state.py STORE --suite mqar-anchor --experiment recall-vs-state --out FIG.png

One panel per number of key-value pairs K (the experiment's ``eval_settings``): each variant's
answer accuracy at its chosen learning rate (its test rows, else its validation rows; mean over
seeds, with the seeds' 95% interval) against the elements its decode state
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
from attnbench.report.selection import select  # noqa: E402
from attnbench.report.values import mean_ci  # noqa: E402


def recall_table(store: Path, suite: str, experiment: str, lr: float | None = None) -> pd.DataFrame:
    """variant, lr, edge, K, accuracy (mean over seeds), lo / hi (95% t interval over seeds), seeds,
    state_elements: one row per variant and K, from the test rows where the experiment has them,
    else the validation rows. With a learning-rate grid each variant stands at its chosen point
    (the report's choice: lowest mean validation loss over its full-budget seeds; tuning rungs are
    left out), and ``edge`` says when that point is the grid's low or high end ("-" inside the
    grid); ``lr`` instead draws one grid point for every variant."""
    data = load_store(store, suite)
    runs = data.runs[(data.runs["experiment"] == experiment) & (data.runs["status"] == "done")]
    if runs.empty:
        raise SystemExit(f"{store}: no finished runs of {suite}/{experiment}")
    lrs = sorted({c.get("lr") for c in runs["coords"] if c.get("lr") is not None})
    if lr is not None:
        runs = runs[[c.get("lr") == lr for c in runs["coords"]]]
        if runs.empty:
            raise SystemExit(f"{suite}/{experiment} has no runs at lr {lr}; its grid: {lrs}")
    chosen = {}  # run id -> (variant, lr, edge)
    for sel in select(runs):
        rate = sel.point.get("lr", lr)
        edge = (
            "-" if len(lrs) < 2 or rate is None else ("low" if rate == lrs[0] else "high" if rate == lrs[-1] else "-")
        )
        for rid in sel.runs[sel.runs["status"] == "done"]["id"]:
            chosen[int(rid)] = (sel.variant, rate, edge)
    ids = set(chosen)
    splits = {t.get("split") for rid, t in zip(data.results["run_id"], data.results["tags"], strict=True) if rid in ids}
    split = "test" if "test" in splits else "val"
    state = {int(r["id"]): r["summary"].get("state_elements") for _, r in runs.iterrows()}
    rows = []
    for _, r in data.results[data.results["run_id"].isin(list(ids))].iterrows():
        tags = r["tags"]
        if r["name"] == "accuracy" and tags.get("split") == split and "num_kv_pairs" in tags:
            run = int(r["run_id"])
            rows.append((*chosen[run], int(tags["num_kv_pairs"]), float(r["value"]), state[run]))
    frame = pd.DataFrame(rows, columns=["variant", "lr", "edge", "K", "accuracy", "state_elements"])
    out = []
    for (variant, rate, edge, k), sub in frame.groupby(["variant", "lr", "edge", "K"]):
        m = mean_ci(sub["accuracy"])
        out.append((variant, rate, edge, k, m.mean, m.lo, m.hi, m.n, sub["state_elements"].iloc[0]))
    columns = ["variant", "lr", "edge", "K", "accuracy", "lo", "hi", "seeds", "state_elements"]
    return pd.DataFrame(out, columns=columns).sort_values(["K", "state_elements"])


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
            x, y = r["state_elements"], r["accuracy"]
            if pd.notna(r["lo"]):  # a seed interval (2+ seeds), drawn within [0, 1] where accuracy lives
                lo, hi = max(0.0, r["lo"]), min(1.0, r["hi"])
                ax.errorbar(x, y, yerr=[[y - lo], [hi - y]], color=colours[r["variant"]], lw=1, capsize=2)
            ax.scatter(x, y, color=colours[r["variant"]], s=36, label=r["variant"])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: the minor labels overlap
        ax.set_title(f"K = {k} pairs")
        ax.set_xlabel("decode state (elements)")
        ax.axhline(1 / k, color="grey", lw=0.8, ls=":")  # guessing one of the K in-context values
        ax.set_ylim(-0.02, 1.05)
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
    ap.add_argument(
        "--lr", type=float, help="draw this grid point for every variant (default: each variant's chosen point)"
    )
    ap.add_argument("--out", type=Path, default=Path("recall-vs-state.png"))
    args = ap.parse_args(argv)
    table = recall_table(args.store, args.suite, args.experiment, args.lr)
    print(table.to_string(index=False))
    draw(table, f"{args.suite} / {args.experiment}: recall against state size (dotted: 1/K)", args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
