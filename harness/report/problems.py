"""What went wrong in a suite, listed at the top of the report: runs that did not finish
(diverged with their step, failed, out of memory, timed out), speed points that ran out of
memory, timed out or failed (with their T), measurements taken under load, failed trust-gate
checks, and comparisons whose runs computed in different precisions. Apart from these faults,
the notes: limits of a small budget (noisy points, flagged fits, few seeds)."""

from __future__ import annotations

import pandas as pd

from attnbench.report.document import Problem
from attnbench.report.gate import FAILING, suite_verdicts
from attnbench.report.grid import edge_notes
from attnbench.report.load import StoreData
from attnbench.report.selection import reported_runs
from attnbench.stats.intervals import t_quantile_975

_POINT_FAILURES = ("oom", "killed", "timeout", "error")


def _runs(data: StoreData) -> list[Problem]:
    out = []
    for _, r in data.runs[data.runs["status"] != "done"].iterrows():
        what = r["status"]
        step = r["summary"].get("diverged_at_step")
        if r["status"] == "diverged" and step is not None:
            what = f"diverged at step {step}"
        seed = f", seed {r['seed']}" if r["seed"] is not None and not pd.isna(r["seed"]) else ""
        out.append(Problem("run", r["variant"], f"{r['experiment']} ({r['kind']}{seed})", what, r["error"] or ""))
    for _, r in data.runs[(data.runs["status"] == "done") & data.runs["error"].notna()].iterrows():
        seed = f", seed {r['seed']}" if r["seed"] is not None and not pd.isna(r["seed"]) else ""
        what = "finished (results kept), then a step after training failed"
        out.append(Problem("run", r["variant"], f"{r['experiment']} ({r['kind']}{seed})", what, r["error"]))
    return out


def _attempts(data: StoreData) -> list[Problem]:
    """Earlier attempts at a cell: a failure that was retried, or a second result a merge kept."""
    if data.attempts.empty:
        return []
    runs = data.runs.set_index("cell_key")
    out = []
    for _, a in data.attempts.iterrows():
        if a["cell_key"] not in runs.index:  # its run's row is damaged: listed by _damaged
            continue
        r = runs.loc[a["cell_key"]]
        out.append(
            Problem(
                "earlier attempt",
                r["variant"],
                f"{r['experiment']} ({r['kind']}, seed {r['seed']})",
                f"{a['status']} ({a['reason']}); stored now: {r['status']}",
                a["error"] or "",
            )
        )
    return out


def _points(data: StoreData) -> list[Problem]:
    speed = data.runs_of("speed").set_index("id")
    res = data.results_of(speed.index, "time_s")
    out = []
    for _, r in res.iterrows():
        t = r["tags"]
        if t.get("status") not in _POINT_FAILURES:
            continue
        run = speed.loc[r["run_id"]]
        out.append(
            Problem(
                "speed point",
                run["variant"],
                f"{run['experiment']} {t.get('mode')} T={t.get('T')}",
                {"oom": "out of memory", "timeout": "timed out"}.get(str(t["status"]), str(t["status"])),
                t.get("error") or "",
            )
        )
    return out


def _noisy(data: StoreData) -> list[Problem]:
    """Speed points measured noisy (after their re-measurements) and slope fits flagged: the
    expected limits of a small budget, shown as notes, not as faults."""
    ids = set(data.runs_of("speed")["id"]) | set(data.runs_of("speed_fit")["id"])
    runs = data.runs.set_index("id")
    out = []
    for _, r in data.results_of(ids).iterrows():
        t, run = r["tags"], runs.loc[r["run_id"]]
        if r["name"] == "time_s" and t.get("noisy") and not _loaded(t):
            out.append(
                Problem(
                    "noisy speed point",
                    run["variant"],
                    f"{run['experiment']} {t.get('mode')} T={t.get('T')}",
                    "noisy",
                    f"{t.get('noisy_reason')} after {t.get('attempts')} measurement(s)",
                )
            )
        elif r["name"] == "slope" and t.get("flags"):
            out.append(
                Problem(
                    "flagged fit",
                    run["variant"],
                    f"{run['experiment']} {t.get('mode')} {t.get('quantity')} slope",
                    "flagged",
                    "; ".join(t["flags"]),
                )
            )
    return out


def _loaded(tags: dict) -> bool:
    """A speed point judged noisy because the machine was loaded (the reason timing wrote)."""
    return "under load" in str(tags.get("noisy_reason") or "")


def _few_seeds(data: StoreData) -> list[Problem]:
    """Protocol experiments decided on fewer than 3 seeds: intervals are wide at that n."""
    train = data.runs_of("train")
    with_protocol = pd.Series(
        [isinstance(s.get("protocol"), dict) for s in train["summary"]], index=train.index, dtype=bool
    )
    reported = reported_runs(train[with_protocol])
    out = []
    for exp in dict.fromkeys(reported["experiment"]):
        runs = reported[(reported["experiment"] == exp) & (reported["status"] == "done")]
        n = runs.groupby("variant")["seed"].nunique().max()
        if 0 < n < 3:
            out.append(
                Problem(
                    "few seeds",
                    "all",
                    exp,
                    f"n={n}",
                    f"each decision rests on {n} paired seed(s): a 95% t interval is "
                    f"{t_quantile_975(n - 1) if n > 1 else float('inf'):.3g} standard errors each side, "
                    "so only large differences are decided",
                )
            )
    return out


def _load(data: StoreData) -> list[Problem]:
    """Training runs whose throughput, and speed points whose times, were measured on a loaded machine."""
    speed = data.runs_of("speed").set_index("id")
    res = data.results_of(speed.index, "time_s")
    out = [
        Problem(
            "speed point under load",
            str(speed.at[run_id, "variant"]),
            f"{speed.at[run_id, 'experiment']} {t.get('mode')} T={t.get('T')}",
            "timed under load",
            f"{t.get('noisy_reason')} after {t.get('attempts')} measurement(s)",
        )
        for run_id, t in zip(res["run_id"], res["tags"], strict=True)
        if t.get("noisy") and _loaded(t)
    ]
    return out + _throughput_load(data)


def _throughput_load(data: StoreData) -> list[Problem]:
    """Runs whose tokens/s and train time were taken on a loaded machine, whatever their kind (train,
    scaling, finetune): one line per experiment (a suite run on a busy machine would otherwise list
    every cell); each run's load stays in the store (summary load_before, load_after)."""
    out = []
    for exp, runs in data.runs.groupby("experiment", sort=True):
        pairs = [
            (v, s) for v, s in zip(runs["variant"], runs["summary"], strict=True) if s.get("throughput_under_load")
        ]
        if not pairs:
            continue
        loaded = [s for _, s in pairs]
        loads = [s.get(k, {}).get("load1", 0.0) for s in loaded for k in ("load_before", "load_after")]
        flagged = sorted({v for v, _ in pairs})
        out.append(
            Problem(
                "throughput under load",
                flagged[0] if len(flagged) == 1 else f"{len(flagged)} variants",
                f"{exp} ({len(loaded)} of {len(runs)} runs)",
                "tokens/s and train time taken under load",
                f"load average {min(loads):.2f} to {max(loads):.2f} on {loaded[0].get('load_before', {}).get('cpus')} "
                "CPUs; each run's load is in the store (summary load_before, load_after)",
            )
        )
    return out


def _mixed_precision(data: StoreData) -> list[Problem]:
    """An experiment whose training runs computed in different dtypes (train.precision auto
    decides per run, from that run's own step): loss and speed then differ by precision as
    well as by mechanism. One line per experiment, naming who ran in what."""
    train = data.runs[(data.runs["kind"] == "train") & (data.runs["status"] == "done")]
    out = []
    for exp, runs in train.groupby("experiment", sort=True):
        by_dtype: dict[str, set[str]] = {}
        for variant, summary in zip(runs["variant"], runs["summary"], strict=True):
            by_dtype.setdefault(str(summary.get("dtype", "fp32")), set()).add(str(variant))
        if len(by_dtype) < 2:
            continue
        who = "; ".join(f"{dtype}: {', '.join(sorted(vs))}" for dtype, vs in sorted(by_dtype.items()))
        out.append(
            Problem(
                "mixed precision",
                f"{len(set(runs['variant']))} variants",
                str(exp),
                "runs of one comparison computed in different dtypes",
                f"{who}; set train.precision to fp32 or bf16 for a comparison in one precision",
            )
        )
    return out


def _gate(data: StoreData) -> list[Problem]:
    verdicts = suite_verdicts(data)
    return [
        Problem(
            "trust gate",
            r["variant"],
            r["check_name"],
            "check failed" if r["status"] == "fail" else "check raised an error",
            r["detail"],
        )
        for _, r in verdicts[verdicts["status"].isin(FAILING)].iterrows()
    ]


def _damaged(data: StoreData) -> list[Problem]:
    """Store rows skipped because a JSON column could not be decoded (a truncated write, a hand edit)."""
    out = []
    for table, row_id, what in data.damaged:
        where = f"results row of run {row_id}" if table == "results" else f"{table} row id {row_id}"
        fix = "restore the store from a copy, or delete the row (sqlite3) and run the suite again to re-make it"
        out.append(Problem("damaged store row", "", where, f"skipped: {what}", fix))
    return out


def find_problems(data: StoreData) -> list[Problem]:
    """Real faults: failed runs and points, failed gate checks, measurements under load."""
    if data.runs.empty:
        return _damaged(data)
    return (
        _damaged(data)
        + _runs(data)
        + _attempts(data)
        + _points(data)
        + _load(data)
        + _mixed_precision(data)
        + _gate(data)
    )


def find_notes(data: StoreData) -> list[Problem]:
    """Limits of the budget a reader should know but that are no fault: noisy speed points,
    fits flagged as uncertain, decisions on fewer than 3 seeds, choices on a grid's edge."""
    return [] if data.runs.empty else _noisy(data) + _few_seeds(data) + edge_notes(data)
