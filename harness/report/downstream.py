"""The section for `lm_eval` experiments: each task's metric per variant, with lm-eval's
standard error, joined to the training run whose checkpoint was evaluated."""

from __future__ import annotations

import pandas as pd

from attnbench.report.document import Section, Table
from attnbench.report.load import StoreData
from attnbench.report.values import MISSING, num


def lm_eval_sections(data: StoreData) -> list[Section]:
    runs = data.runs_of("lm_eval")
    if runs.empty:
        return []  # the suite has no such experiment: no section, none in the contents
    by_key = {r["cell_key"]: r for _, r in data.runs.iterrows()}
    sections = []
    for exp in dict.fromkeys(runs["experiment"]):
        exp_runs = runs[runs["experiment"] == exp]
        res = data.results_of(exp_runs["id"])
        meta = exp_runs.set_index("id")
        rows = []
        for _, r in res.iterrows():
            t, run = r["tags"], meta.loc[r["run_id"]]
            trained = by_key.get(t.get("train_cell_key"))
            rows.append(
                {
                    "variant": run["variant"],
                    "seed": run["seed"],
                    "task": t.get("task"),
                    "metric": t.get("metric", r["name"]),
                    "filter": t.get("filter"),
                    "value": r["value"],
                    "unit": r["unit"],
                    "stderr": t.get("stderr"),
                    "n_samples": t.get("n_samples"),
                    "higher_is_better": t.get("higher_is_better"),
                    "train_experiment": trained["experiment"] if trained is not None else None,
                    "train_run_id": t.get("train_run_id"),
                    "train_cell_key": t.get("train_cell_key"),
                }
            )
        section = Section(
            f"Downstream (lm-eval): {exp}",
            intro=(
                "lm-eval task scores of each trained checkpoint; stderr as lm-eval reports it (bootstrap or analytic)."
            ),
        )
        not_done = exp_runs[exp_runs["status"] != "done"]
        for _, r in not_done.iterrows():
            section.notes.append(f"{r['variant']} (seed {r['seed']}): {r['status']}: {r['error'] or 'no detail'}")
        if not rows:
            section.missing = f"experiment {exp!r} stored no lm-eval scores"
            sections.append(section)
            continue
        frame = pd.DataFrame(rows).sort_values(["task", "metric", "variant", "seed"], kind="stable")
        view = pd.DataFrame(
            {
                "task": frame["task"],
                "metric": frame["metric"],
                "variant": frame["variant"],
                "seed": frame["seed"],
                "value": [f"{num(v)} {u}".strip() for v, u in zip(frame["value"], frame["unit"], strict=True)],
                "stderr": [num(v, 2) for v in frame["stderr"]],
                "better": frame["higher_is_better"].map({True: "higher", False: "lower"}).fillna(MISSING),
                "samples": [num(v) for v in frame["n_samples"]],
                "trained in": [
                    f"{e} (run {num(i)})" if e else MISSING
                    for e, i in zip(frame["train_experiment"], frame["train_run_id"], strict=True)
                ],
            }
        )
        section.tables.append(Table(f"{exp}-lm-eval", f"{exp}: lm-eval scores", frame, view))
        sections.append(section)
    return sections
