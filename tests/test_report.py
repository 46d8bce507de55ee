"""`attnbench report`: HTML + Markdown + CSV/Parquet reports generated from the store only.

One real store is built once for the module by running a tiny suite through the CLI
(train with a learning-rate grid and two seeds, including the `future` variant with its
auxiliary loss; a synthetic recall task; a speed sweep of softmax and linear). A second,
synthetic store (``Store.save_run``) holds the problems a report must show plainly: a
diverged run, an out-of-memory speed point, a failed trust-gate check, and names and
error texts that contain markup.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from attnbench.cli import main
from attnbench.errors import ReportError
from attnbench.gate.checks import CheckResult
from attnbench.report import write_report
from attnbench.report.figures import make_palette
from attnbench.store.database import Metric, Result, RunRecord, Store
from tests.helpers import run_cli, write_suite

SUITE = """
    version: 1
    name: report-tiny
    device: cpu
    defaults:
      model: {d_model: 32, n_layer: 1, n_head: 2}
    experiments:
      - name: lm
        kind: train
        variants: [softmax, future]
        seeds: [0, 1]
        data: {source: stdlib, max_bytes: 50000}
        grid: {lr: [1.0e-3, 3.0e-3]}
        train: {budget: {steps: 10}, batch_size: 2, seq_len: 32, warmup_steps: 2, eval_interval: 5,
                eval_tokens: 256, log_interval: 5, checkpoint: false}
      - name: recall
        kind: train
        variants: [softmax]
        data: {source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 32, num_kv_pairs: 2},
               train_examples: 64, val_examples: 16, eval_settings: [{num_kv_pairs: 2}, {num_kv_pairs: 4}]}
        train: {budget: {steps: 5}, batch_size: 2, seq_len: 32, warmup_steps: 1, eval_interval: 5,
                log_interval: 5, checkpoint: false}
      - name: sp
        kind: speed
        variants: [softmax, linear]
        speed: {lengths: [64, 128, 256], modes: [forward, decode], decode_contexts: [64],
                decode_tokens: 2, min_rounds: 1, max_time: 0.01, warmup: 0, threads: 1}
"""
EVIL = "<script>alert(1)</script>"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def real_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("real")
    suite = write_suite(root / "tiny.yaml", SUITE)
    proc = run_cli("run", str(suite), "--store", str(root / "store.sqlite"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # `attnbench run` ends by writing the suite's report beside the store and printing its path.
    index = root / "reports" / "report-tiny" / "index.html"
    assert f"report: {index}" in proc.stdout and index.is_file()
    return root / "store.sqlite"


@pytest.fixture(scope="module")
def real_report(real_store, tmp_path_factory) -> Path:
    """The report of the real store, made by the console script in a subprocess."""
    out = tmp_path_factory.mktemp("out") / "report"
    mpl = tmp_path_factory.mktemp("mpl")
    before = _sha(real_store)
    proc = run_cli("report", "--store", str(real_store), "--out", str(out), env={"MPLCONFIGDIR": str(mpl)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(out / "index.html")
    assert _sha(real_store) == before  # read-only: the store file is unchanged
    assert any(mpl.iterdir())  # matplotlib used the MPLCONFIGDIR it was given
    return out


def _table(out: Path, slug: str) -> pd.DataFrame:
    csv = pd.read_csv(out / "tables" / f"{slug}.csv")
    parquet = pd.read_parquet(out / "tables" / f"{slug}.parquet")
    assert list(csv.columns) == list(parquet.columns) and len(csv) == len(parquet)
    return parquet


def test_real_report_files_tables_and_figures(real_store, real_report):
    html = (real_report / "index.html").read_text()
    md = (real_report / "report.md").read_text()
    pngs = sorted((real_report / "figures").glob("*.png"))
    # Figures: loss curves, recall accuracy, forward and decode speed; embedded and beside the Markdown.
    assert {p.stem for p in pngs} >= {"lm-loss-d32_L1_H2", "recall-recall", "sp-forward-m0", "sp-decode-m0"}
    # Each figure in the page once: embedded as its PNG, or the headline picture as inline SVG (its PNG beside).
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    inline = re.findall(r"<figure><svg [^>]*>\s*<title>([^<]*)</title>", html)
    assert len(images) + len(inline) == len(pngs) and inline in ([], ["Quality against cost"])
    beside = {(real_report / "figures" / "tradeoff.png").read_bytes()} if inline else set()
    assert {base64.b64decode(i) for i in images} | beside == {p.read_bytes() for p in pngs}
    for p in pngs:
        assert f"(figures/{p.name})" in md
    # Self-contained: no script, no external resource.
    assert "<script" not in html.lower() and not re.search(r'(src|href)="(https?:)?//', html)

    with Store(real_store) as store:
        runs = store.runs(suite="report-tiny")
    lm = _table(real_report, "lm-variants")
    assert set(lm["variant"]) == {"softmax", "future"}
    for _, row in lm.iterrows():  # the table's numbers are the store's, at the chosen point
        lr = float(row["grid_point"].removeprefix("lr="))
        losses = [
            r["summary"]["val_loss"]
            for r in runs
            if r["experiment"] == "lm" and r["variant"] == row["variant"] and r["coords"]["lr"] == lr
        ]
        assert len(losses) == 2 and row["loss_mean"] == pytest.approx(sum(losses) / 2)
        assert row["loss_ci95_lo"] < row["loss_mean"] < row["loss_ci95_hi"]
        other = [
            r["summary"]["val_loss"]
            for r in runs
            if r["experiment"] == "lm" and r["variant"] == row["variant"] and r["coords"]["lr"] != lr
        ]
        assert row["loss_mean"] <= sum(other) / 2  # the best point on held-out loss was chosen
        assert row["steps"] == 10 and row["tokens"] == 10 * 2 * 32 and row["status"] == "done"
        assert row["n_params"] > 0 and row["trust_gate"] == "passed"
        assert f"{row['loss_mean']:.4g}" in html
    by_variant = lm.set_index("variant")
    assert "auxiliary" in by_variant["objective"]["future"] and by_variant["aux_future_attn_final"]["future"] > 0
    assert "future (+aux: future_attn)" in html

    tasks = _table(real_report, "recall-tasks")
    acc = tasks[tasks["metric"] == "accuracy"]
    assert sorted(acc["num_kv_pairs"]) == [2, 4] and acc["mean"].between(0, 1).all()

    points = _table(real_report, "sp-points")
    assert set(points["variant"]) == {"softmax", "linear"}
    assert set(zip(points["mode"], points["T"], strict=True)) == {
        ("forward", 64),
        ("forward", 128),
        ("forward", 256),
        ("decode", 64),
    }
    assert (points["status"] == "ok").all()
    slopes = _table(real_report, "sp-slopes")
    linear = slopes[(slopes["variant"] == "linear") & (slopes["quantity"] == "time")].set_index("mode")
    assert linear["n_points"]["forward"] == 3 and linear["ci95_lo"]["forward"] < linear["slope"]["forward"]
    assert pd.isna(linear["slope"]["decode"])  # one context: no fit, said so
    assert "no fit (1 point: too few to fit (a slope needs 3))" in html
    assert set(_table(real_report, "sp-crossover")["variant"]) == {"linear"}
    gate = _table(real_report, "trust-gate")
    assert set(gate["variant"]) == {"softmax", "future", "linear"}
    # every check passes, but the bf16/fp16 autocast check, which is skipped (and says so) on a CPU
    assert set(gate[gate["status"] != "pass"]["check_name"]) <= {"autocast_at_scale"}
    assert (gate["status"] != "fail").all()
    # Kinds this suite never ran have no section, and the contents list only what it has.
    toc = html[html.index("<nav>") : html.index("</nav>")]
    assert "Scaling" not in toc and "Downstream" not in toc and "(missing)" not in toc
    assert "Training: lm" in toc and "Speed and memory: sp" in toc


def test_default_suite_and_output_folder(real_store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default folder is beside the store, not under the cwd
    assert main(["report", "--store", str(real_store)]) == 0
    index = real_store.parent / "reports" / "report-tiny" / "index.html"
    assert capsys.readouterr().out.strip() == str(index) and index.is_file()
    assert main(["report", "--store", str(real_store), "--suite", "report-tny"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'report-tiny'" in err and "suites in this store: report-tiny" in err


def _record(
    key: str,
    experiment: str,
    kind: str,
    variant: str,
    status: str = "done",
    seed: int | None = 0,
    model: int = 0,
    summary: dict | None = None,
    error: str | None = None,
    gate_failed: list[str] | None = None,
    metrics: list[Metric] | None = None,
    results: list[Result] | None = None,
) -> RunRecord:
    return RunRecord(
        cell_key=key,
        suite="problems",
        experiment=experiment,
        kind=kind,
        variant=variant,
        status=status,
        seed=seed,
        coords={"variant": variant, "model": model, "d_model": 32 * (model + 1), "n_layer": 1, "seed": seed},
        config={"model": {"d_model": 32 * (model + 1), "n_layer": 1, "n_head": 2}},
        provenance={
            "git": {"commit": "c0ffee", "dirty": False},
            "versions": {"torch": "2.x"},
            "device": "cpu:test",
            "gate": {"key": f"gate-{variant}", "failed": gate_failed or []},
        },
        summary=summary or {},
        started_at=100.0,
        finished_at=200.0,
        error=error,
        metrics=metrics or [],
        results=results or [],
    )


def _train_summary(loss: float | None, **extra) -> dict:
    return {
        "val_loss": loss,
        "val_bpb": None if loss is None else loss / 0.6931,
        "n_params": 1000,
        "steps": 20,
        "tokens": 1280,
        "train_time_s": 2.0,
        "tokens_per_s": 640.0,
        "budget": {"steps": 20},
        **extra,
    }


def _point(mode: str, T: int, status: str, value: float | None, error: str | None = None) -> list[Result]:
    tags = {"mode": mode, "T": T, "status": status, "error": error}
    mem = None if value is None else 1e6 * T
    return [Result("time_s", value, "s", tags), Result("peak_memory_bytes", mem, "B", dict(tags))]


@pytest.fixture
def problem_store(tmp_path) -> Path:
    path = tmp_path / "problems.sqlite"
    curve = [Metric(s, s * 64, s * 0.1, "train/loss", 5.0 - s * 0.1) for s in (5, 10, 15, 20)]
    with Store(path) as store:
        store.save_run(_record("a", "lm", "train", "softmax", summary=_train_summary(3.1), metrics=curve))
        store.save_run(
            _record(
                "b",
                "lm",
                "train",
                "unstable",
                status="diverged",
                summary=_train_summary(None, diverged_at_step=7),
                error=f"training loss nan at step 7 {EVIL}",
            )
        )
        store.save_run(
            _record("c", "lm", "train", "leaky", summary=_train_summary(2.5), gate_failed=["no_future_leak_forward"])
        )
        store.save_run(_record("d", "lm", "train", EVIL, summary=_train_summary(3.3)))
        store.save_run(
            _record(
                "e",
                "sp",
                "speed",
                "softmax",
                results=[r for T in (64, 128, 256) for r in _point("forward", T, "ok", 1e-4 * T)],
            )
        )
        store.save_run(
            _record(
                "f",
                "sp",
                "speed",
                "linear",
                results=[
                    *_point("forward", 64, "ok", 0.01),
                    *_point("forward", 128, "ok", 0.012),
                    *_point("forward", 256, "oom", None, "out of memory: tried to allocate 1 GiB"),
                    *_point("forward", 512, "skipped", None, "skipped after oom at T=256"),
                ],
            )
        )
        store.save_run(
            _record(
                "h",
                "sp",
                "speed_fit",
                "linear",
                seed=None,
                results=[
                    Result(
                        "slope",
                        0.26,
                        "",
                        {
                            "mode": "forward",
                            "quantity": "time",
                            "model": 0,
                            "ci95": [0.1, 0.42],
                            "n_points": 3,
                            "T_min": 64,
                            "T_max": 256,
                        },
                    ),
                    Result(
                        "crossover_T",
                        128,
                        "",
                        {
                            "mode": "forward",
                            "model": 0,
                            "against": "softmax",
                            "status": "found",
                            "T_interp": 110.0,
                            "compared_T": [64, 128, 256],
                        },
                    ),
                ],
            )
        )
        for i, (n, loss) in enumerate([(1000, 4.0), (4000, 3.5), (16000, 3.2)]):
            store.save_run(
                _record(
                    f"sc{i}",
                    "sc",
                    "scaling",
                    "softmax",
                    model=i,
                    summary={"n_params": n, "train_flops": 6.0 * n * n, "val_loss": loss},
                )
            )
        store.save_run(
            _record(
                "scfit",
                "sc",
                "scaling_fit",
                "softmax",
                seed=None,
                results=[
                    Result(
                        "power_law",
                        0.5,
                        "",
                        {"x": "params", "a": 60.0, "b": 0.5, "c": 2.1, "rmse": 0.01, "n_points": 3},
                    )
                ],
            )
        )
        store.save_run(
            _record(
                "g",
                "ev",
                "lm_eval",
                "softmax",
                results=[
                    Result(
                        "acc",
                        0.25,
                        "",
                        {
                            "task": "attnbench_recall",
                            "metric": "acc",
                            "filter": "none",
                            "stderr": 0.03,
                            "n_samples": 40,
                            "higher_is_better": True,
                            "train_run_id": 1,
                            "train_cell_key": "a",
                        },
                    )
                ],
            )
        )
        store.save_checks(
            "gate-leaky",
            "leaky",
            [
                CheckResult("no_future_leak_forward", "fail", 0.5, 1e-5, f"logits at t changed by 0.5 {EVIL}"),
                CheckResult("deterministic", "pass", 0.0, 0.0, "bitwise equal"),
            ],
            {"device": "cpu:test"},
        )
        store.save_checks(
            "gate-softmax", "softmax", [CheckResult("no_future_leak_forward", "pass", 1e-7, 1e-5, "ok")], {}
        )
    return path


def test_problems_are_listed_first_and_plainly(problem_store, tmp_path):
    before = _sha(problem_store)
    index = write_report(problem_store, None, tmp_path / "out")
    assert _sha(problem_store) == before
    html = index.read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    problems = html[html.index('id="problems"') : html.index("<nav>")]
    assert "unstable" in problems and "diverged at step 7" in problems
    assert "linear" in problems and "sp forward T=256: out of memory" in problems
    assert "leaky" in problems and "no_future_leak_forward: check failed" in problems
    assert html.index('id="problems"') < html.index("Training: lm")
    assert md.index("## Problems") < md.index("## Training: lm") and "diverged at step 7" in md
    points = pd.read_csv(tmp_path / "out" / "tables" / "sp-points.csv")
    oom = points[(points["variant"] == "linear") & (points["T"] == 256)].iloc[0]
    assert oom["status"] == "oom" and pd.isna(oom["time_s"])
    assert "oom at T=256" in html  # shown as such in the points table
    assert "faster from T=128 (≈110 interpolated)" in html and "0.26 [0.1, 0.42]" in html
    lm = pd.read_csv(tmp_path / "out" / "tables" / "lm-variants.csv").set_index("variant")
    assert lm.loc["leaky", "trust_gate"] == "FAILED no_future_leak_forward"
    assert str(lm.loc["unstable", "status"]).startswith("diverged at step 7")
    lm_eval = pd.read_csv(tmp_path / "out" / "tables" / "ev-lm-eval.csv")
    assert lm_eval.iloc[0][["task", "value", "stderr"]].tolist() == ["attnbench_recall", 0.25, 0.03]
    # Markup from plugins and the store is escaped everywhere.
    for text in (html, md):
        assert EVIL not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    fits = pd.read_csv(tmp_path / "out" / "tables" / "sc-power-law.csv")
    assert fits.iloc[0]["variant"] == "softmax" and "too few to fit" in fits.iloc[0]["error"]  # 3 sizes: no b
    assert "b" not in fits or fits["b"].isna().all()
    assert (tmp_path / "out" / "figures" / "sc-scaling.png").stat().st_size > 1000
    assert "no scaling experiments" not in html


def test_empty_store_and_missing_kinds_say_what_is_missing(tmp_path):
    Store(tmp_path / "empty.sqlite").close()
    index = write_report(tmp_path / "empty.sqlite", None, tmp_path / "out")
    html = index.read_text()
    assert "this store has no runs: run a suite first" in html
    assert (tmp_path / "out" / "report.md").read_text().count("Missing:") >= 1


def test_report_removes_staging_folders_killed_writers_left(tmp_path, capsys):
    Store(tmp_path / "s.sqlite").close()
    out = tmp_path / "out"
    hour_ago = os.path.getmtime(tmp_path) - 3600
    left = [tmp_path / ".out.4194999.0badc0de.tmp", tmp_path / ".out.4194999.0badc0de.old"]  # no such process
    kept = [
        tmp_path / f".out.{os.getpid()}.12345678.tmp",  # a writer still running
        tmp_path / ".other.4194999.0badc0de.tmp",  # another report's
        tmp_path / ".out.notes",  # not a writer's
    ]
    for folder in left + kept:
        (folder / "figures").mkdir(parents=True)
        os.utime(folder, (hour_ago, hour_ago))
    assert main(["report", "--store", str(tmp_path / "s.sqlite"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted(p.name for p in kept)


def _old_report(folder: Path) -> dict[str, str]:
    """A report folder as an earlier writer left it, with the user's own file in it."""
    (folder / "figures").mkdir(parents=True)
    files = {"index.html": "the old page", "report.md": "the old text", "figures/a.png": "old", "mine.txt": "own"}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def test_a_writer_stopped_between_its_two_renames_puts_the_old_report_back(tmp_path, monkeypatch):
    import sys

    write = sys.modules["attnbench.report.write"]  # the module (the package exports a function of that name)
    Store(tmp_path / "s.sqlite").close()
    out = tmp_path / "out"
    files = _old_report(out)
    real_replace, stopped = os.replace, []

    def stopped_before_the_new_one_moves_in(src, dst):
        if Path(dst) == out and not stopped:  # the old report is aside, the new one not yet in
            stopped.append(src)
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(write.os, "replace", stopped_before_the_new_one_moves_in)
    with pytest.raises(KeyboardInterrupt):
        write_report(tmp_path / "s.sqlite", None, out)
    monkeypatch.undo()
    assert stopped and {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()} == files
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_next_writer_puts_back_a_report_a_killed_writer_left_aside(tmp_path, monkeypatch):
    """Killed between its two renames, a writer leaves no report folder and the old one aside: the
    next writer puts it back before anything else, so its own failure still leaves the old report."""
    import sys

    write = sys.modules["attnbench.report.write"]
    Store(tmp_path / "s.sqlite").close()
    out, aside = tmp_path / "out", tmp_path / ".out.4194999.0badc0de.old"  # no such process
    files = _old_report(aside)
    hour_ago = os.path.getmtime(tmp_path) - 3600
    os.utime(aside, (hour_ago, hour_ago))

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(write, "to_html", dies)
    with pytest.raises(KeyboardInterrupt):
        write_report(tmp_path / "s.sqlite", None, out)
    monkeypatch.undo()
    assert {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()} == files
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    write_report(tmp_path / "s.sqlite", None, out)
    assert (out / "mine.txt").read_text() == "own" and "the old page" not in (out / "index.html").read_text()


def test_paths_that_are_not_stores_are_typed_errors(tmp_path, capsys):
    with pytest.raises(ReportError, match="no results store at"):
        write_report(tmp_path / "missing.sqlite")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ReportError, match="not a results store"):
        write_report(tmp_path / "notes.txt")
    sqlite3.connect(tmp_path / "other.sqlite").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ReportError, match="not an attnbench results store"):
        write_report(tmp_path / "other.sqlite")
    assert main(["report", "--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "attnbench: error: no results store at" in capsys.readouterr().err
    assert not (tmp_path / "missing.sqlite").exists()  # a report never creates a store


def test_palette_is_fixed_by_sorted_variant_names():
    a = make_palette(["softmax", "linear", "future"])
    b = make_palette(["future", "softmax", "linear", "future"])
    assert a == b and len(set(a.values())) == 3


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def test_page_renders_in_headless_chromium_without_console_errors(problem_store, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install chromium); required when CI is set")
        pytest.skip("chromium is not installed")
    index = write_report(problem_store, None, tmp_path / "out")
    flags = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run([*flags, "--dump-dom", index.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<table") >= 5 and dom.stdout.count('<img src="data:image/png;base64,') >= 2
    assert "diverged at step 7" in dom.stdout and "<script>alert" not in dom.stdout
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert console == []  # no script errors, no blocked (external) resources
    shot = tmp_path / "page.png"
    proc = subprocess.run(
        [*flags, "--window-size=1280,2000", f"--screenshot={shot}", index.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and shot.stat().st_size > 10_000


def test_runs_timed_under_load_are_one_problem_per_experiment(tmp_path):
    from tests.report_store import record, write_store

    def busy(key: str, variant: str, seed: int, loaded: bool, load1: float):
        summary = {
            "throughput_under_load": loaded,
            "load_before": {"load1": load1, "cpus": 2},
            "load_after": {"load1": load1 + 0.5, "cpus": 2},
        }
        return record(key, "text", "train", variant, seed, {"lr": 1e-3}, {}, summary)

    extra = [
        busy("b1", "softmax", 7, True, 3.0),
        busy("b2", "linear", 7, True, 4.25),
        busy("b3", "window", 7, False, 0.1),
    ]
    index = write_report(write_store(tmp_path / "store.sqlite", extra), None, tmp_path / "out")
    problems = index.read_text().split('id="problems"')[1].split("<nav>")[0]
    md = (tmp_path / "out" / "report.md").read_text()
    assert problems.count("throughput under load") == 1 and md.count("throughput under load") == 1
    lines = [line for line in md.splitlines() if "throughput under load" in line]
    assert (
        "2 variants" in lines[0] and "(2 of 39 runs)" in lines[0] and "load average 3.00 to 4.75 on 2 CPUs" in lines[0]
    )


def test_a_comparison_whose_runs_computed_in_different_precisions_is_a_problem(tmp_path):
    from tests.report_store import record, write_store

    def ran_in(key: str, variant: str, dtype: str):
        summary = {"dtype": dtype, "precision": "auto", "precision_reason": "probe: bf16 training step"}
        return record(key, "text", "train", variant, 7, {"lr": 1e-3}, {}, summary)

    mixed = [ran_in("p1", "softmax", "fp32"), ran_in("p2", "linear", "bf16-autocast")]
    write_report(write_store(tmp_path / "mixed.sqlite", mixed), None, tmp_path / "mixed")
    lines = [ln for ln in (tmp_path / "mixed" / "report.md").read_text().splitlines() if "mixed precision" in ln]
    assert len(lines) == 1, lines  # one line for the experiment
    assert "bf16-autocast: linear" in lines[0] and "set train.precision to fp32 or bf16" in lines[0]
    write_report(write_store(tmp_path / "one.sqlite", []), None, tmp_path / "one")
    assert "mixed precision" not in (tmp_path / "one" / "report.md").read_text()  # one dtype: no problem
