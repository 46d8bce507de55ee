"""The catalogue of bad input: each case through the CLI, asserting a non-zero exit, no
traceback, and a message that names the file/key/option and the fix. Validate-level
(nothing trains) wherever the fault can be found there."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnbench.cli import main
from tests.helpers import run_cli, write_suite

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
GOOD = """
version: 1
name: cat
defaults:
  model: {d_model: 16, n_layer: 1, n_head: 2}
  data: DATA
  train: {batch_size: 2, seq_len: 64, lr: 1.0e-2, warmup_steps: 1}
experiments:
  - name: e
    kind: train
    variants: [softmax]
    train: {budget: BUDGET}
"""


def suite_text(data: str = "{source: builtin}", budget: str = "{steps: 2}") -> str:
    return GOOD.replace("DATA", data).replace("BUDGET", budget)


@dataclass
class Case:
    name: str
    setup: Callable[[Path], list[str]]  # writes files under tmp_path; returns the CLI arguments
    names: list[str]  # what the message must mention: file/key/option and the fix
    env: dict[str, str] | None = None
    code: int = 2


def _suite(tmp: Path, text: str, name: str = "s.yaml") -> Path:
    return write_suite(tmp / name, text)


def _validate(text: str):
    return lambda tmp: ["validate", str(_suite(tmp, text))]


def _data_file(content: bytes, extra: str = ""):
    def setup(tmp: Path) -> list[str]:
        (tmp / "corpus.txt").write_bytes(content)
        return ["validate", str(_suite(tmp, suite_text(f"{{source: text, path: corpus.txt{extra}}}")))]

    return setup


# Nested aliases, 9 of each level: 9**6 = 531,441 values once expanded (the classic "billion laughs" at 9**9).
_LAUGHS = "x-lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"x-lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 7)
)

CASES = [
    Case(
        "budget-seconds-inf", _validate(suite_text(budget="{seconds: .inf}")), ["s.yaml:", "budget.seconds", "finite"]
    ),
    Case("budget-flops-nan", _validate(suite_text(budget="{flops: .nan}")), ["s.yaml:", "budget.flops"]),
    Case(
        "duplicate-key",
        _validate(suite_text().replace("  train: {batch_size", "  model: {d_model: 32}\n  train: {batch_size")),
        ["s.yaml:6", "'model' appears twice", "first at line 4", "Keep one"],
    ),
    Case(
        "duplicate-experiment-key",
        _validate(suite_text().replace("    kind: train\n", "    kind: train\n    kind: speed\n")),
        ["s.yaml:10", "'kind' appears twice", "first at line 9"],
    ),
    Case("empty-suite-file", lambda tmp: ["validate", str(_suite(tmp, ""))], ["s.yaml:1", "empty", "version: 1"]),
    Case(
        "binary-suite-file",
        lambda tmp: ["validate", str(_write(tmp / "s.yaml", b"\x89PNG\r\n\x1a\n\xff\xfe"))],
        ["s.yaml", "UTF-8", ".yaml"],
    ),
    Case("missing-suite-file", lambda tmp: ["validate", str(tmp / "nope.yaml")], ["nope.yaml", "not found"]),
    Case(
        "misspelt-key",
        _validate(suite_text().replace("warmup_steps", "warmup_stepz")),
        ["s.yaml:", "warmup_stepz", "correct its spelling"],
    ),
    Case(
        "unknown-variant",
        _validate(suite_text().replace("[softmax]", "[softmaks]")),
        ["s.yaml:", "softmaks", "softmax"],
    ),
    Case("empty-data-file", _data_file(b""), ["corpus.txt", "empty", "data.path"]),
    Case("binary-data-file", _data_file(bytes(range(256)) * 40), ["corpus.txt", "not UTF-8", "data.path"]),
    Case(
        "data-file-too-small",
        _data_file(b"hello world\n" * 20),
        ["corpus.txt", "240 bytes", "needs at least 2560 bytes", "seq_len"],
    ),
    Case(
        "missing-data-file",
        _data_file(b"x", extra=", val_path: gone.txt"),
        ["gone.txt", "does not exist", "data.val_path"],
    ),
    Case(
        "plugins-env-unknown",
        lambda tmp: ["list"],
        ["ATTNBENCH_PLUGINS", "nosuch", "installed:", "softmax"],
        env={"ATTNBENCH_PLUGINS": "softmax,nosuch"},
    ),
    Case(
        "variants-not-in-suite",
        lambda tmp: [
            "run",
            str(_suite(tmp, suite_text())),
            "--store",
            str(tmp / "st.sqlite"),
            "--variants",
            "linear",
            "--no-report",
        ],
        ["--variants", "linear", "does not run", "softmax"],
    ),
    Case(
        "device-tpu",
        lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(tmp / "st.sqlite"), "--device", "tpu"],
        ["'tpu'", "--device", "cpu"],
    ),
    Case(
        "check-long-T-zero",
        lambda tmp: ["check", "softmax", "--long-T", "0", "--store", str(tmp / "st.sqlite")],
        ["--long-T", "above 0"],
    ),
    Case(
        "check-time-limit-inf",
        lambda tmp: ["check", "softmax", "--time-limit", "inf", "--store", str(tmp / "st.sqlite")],
        ["--time-limit", "finite"],
    ),
    Case(
        "store-not-sqlite",
        lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(_write(tmp / "notes.txt", b"mine"))],
        ["notes.txt", "not a SQLite database", "--store"],
    ),
    Case(
        "store-check-missing",
        lambda tmp: ["store", "check", str(tmp / "gone.sqlite")],
        ["gone.sqlite", "no results store"],
    ),
    Case(
        "merge-input-missing",
        lambda tmp: ["store", "merge", str(tmp / "out.sqlite"), str(tmp / "gone.sqlite")],
        ["gone.sqlite", "not found"],
    ),
    # issue 28, item 4: accepted silently before
    Case(
        "variants-empty",
        lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(tmp / "st.sqlite"), "--variants", ""],
        ["--variants ''", "names nothing", "leave the option out"],
    ),
    Case(
        "plugins-env-empty",
        lambda tmp: ["list"],
        ["ATTNBENCH_PLUGINS", "names no plugin", "unset it"],
        env={"ATTNBENCH_PLUGINS": " , "},
    ),
    Case(
        "plugins-env-hides-task",
        _validate(
            suite_text(data="{source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 64, num_kv_pairs: 4}}")
        ),
        ["unknown task 'mqar'", "ATTNBENCH_PLUGINS='softmax'", "unset it"],
        env={"ATTNBENCH_PLUGINS": "softmax"},
    ),
    # issue 28, item 5: a RecursionError traceback, a multi-megabyte message, a 100 kB one before
    Case(
        "yaml-nested-20000-deep",
        _validate("version: 1\nname: deep\nexperiments: " + "[" * 20000 + "]" * 20000),
        ["s.yaml:3:", "nest more than 64 levels deep", "(the limit)", "Remove the extra"],
    ),
    Case(
        "yaml-deep-through-an-alias",
        _validate(
            suite_text() + "x-deep: &d " + "[" * 40 + "]" * 40 + "\n" + "x-deeper: " + "[" * 30 + "*d" + "]" * 30 + "\n"
        ),
        ["s.yaml:13:", "more than 64 levels deep once the alias *d is expanded"],
    ),
    Case(
        "yaml-alias-bomb",
        _validate(suite_text() + _LAUGHS),
        ["s.yaml:17:", "more than 100,000 values (the limit)", "aliases of aliases multiply", "fewer times"],
    ),
    Case(
        "yaml-alias-inside-its-anchor",
        _validate(suite_text() + "x-loop: &a [1, *a]\n"),
        ["s.yaml:12:", "alias *a is used inside the value its anchor names", "only after"],
    ),
    Case(
        "set-nested-too-deep",
        lambda tmp: ["validate", str(_suite(tmp, suite_text())), "--set", "defaults.train.lr=" + "[" * 100 + "]" * 100],
        ["--set 'defaults.train.lr=[[[", "(220 characters)", "nest more than 64 levels deep"],
    ),
    Case(
        "absurdly-long-variant-name",
        _validate(suite_text().replace("[softmax]", "['" + "a" * 100_000 + "']")),
        ["s.yaml:10:", "unknown variant 'aaaa", "... (100,002 characters). Available:"],
    ),
    Case(
        "absurdly-long-value",
        _validate(suite_text(data="{source: '" + "b" * 100_000 + "'}")),
        ["s.yaml:5:", "data.source", "(got 'bbbb", "... (100,002 characters))"],
    ),
    Case(
        "data-path-too-long-for-the-file-system",
        _validate(suite_text(data="{source: text, path: '" + "c" * 5000 + "'}")),
        ["data file", "cannot be looked up", "File name too long", "data.path"],
    ),
    # issue 44, item 4: an example of variant names, a TypeError naming no option, a misleading minimum
    Case(
        "experiments-empty",
        lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(tmp / "st.sqlite"), "--experiments", ""],
        ["--experiments ''", "names nothing", "(e.g. --experiments e)"],
    ),
    Case(
        "task-option-of-the-wrong-type",
        _validate(suite_text(data="{source: task, task: text_recall, task_options: {n_pairs: '8'}}")),
        ["s.yaml:", "task 'text_recall'", "n_pairs must be an integer, got '8'"],
    ),
    Case(
        "noise-tokens-fill-the-vocabulary",
        _validate(
            suite_text(
                data="{source: task, task: mad_noisy_recall, task_options: {vocab_size: 32, noise_vocab_size: 32}}"
            )
        ),
        ["noise_vocab_size 32 leaves 0 of vocab_size 32 tokens", "use noise_vocab_size <= 28 or vocab_size >= 36"],
    ),
]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _main(argv: list[str]) -> int:
    """The CLI's entry point in this process (fast); any exception it lets out fails the test."""
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code if isinstance(exc.code, int) else 1


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_a_clear_message(tmp_path, case, capsys, monkeypatch):
    for key, value in {**OFFLINE, **(case.env or {})}.items():
        monkeypatch.setenv(key, value)
    code = _main(case.setup(tmp_path))
    out, err = capsys.readouterr()
    assert code == case.code, (code, out, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out
    assert len(err) < 2000, f"a {len(err):,}-character message: {err[:500]}"  # quoted values are cut
    for needle in case.names:
        assert needle in err, f"{needle!r} not in: {err}"


def test_a_bad_input_through_the_installed_command_prints_no_traceback(tmp_path):
    proc = run_cli("validate", str(_suite(tmp_path, suite_text(budget="{seconds: .inf}"))), env=OFFLINE)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "budget.seconds" in proc.stderr


def test_cuda_without_cuda_is_refused_by_name(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = run_cli(
        "run",
        str(_suite(tmp_path, suite_text())),
        "--store",
        str(tmp_path / "st.sqlite"),
        "--device",
        "cuda",
        env=OFFLINE,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.search(r"device 'cuda' is not available on this machine; use one of: auto, cpu", proc.stderr)


def test_suites_whose_names_differ_only_in_dropped_characters_get_their_own_report_folders(tmp_path):
    from attnbench.report.write import folder_name

    assert folder_name("plain-name") == "plain-name"
    a, b = folder_name("exp/1"), folder_name("exp?1")
    assert a != b and a.startswith("exp_1-") and b.startswith("exp_1-")


# -- issue 28, item 3: a report killed while it is written leaves the old one whole ----------
def test_a_report_that_fails_half_way_leaves_the_old_report_whole(tmp_path, monkeypatch):
    import sys

    from attnbench.report import render, write_report

    write = sys.modules["attnbench.report.write"]  # the module (the package exports a function of that name)

    store = tmp_path / "st.sqlite"
    assert _main(["run", str(_suite(tmp_path, suite_text())), "--store", str(store), "--no-report"]) == 0
    out = tmp_path / "report"
    write_report(store, "cat", out)
    (out / "mine.txt").write_text("the user's own file")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert any(p.parts[0] == "tables" for p in before) and any(p.parts[0] == "figures" for p in before)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt  # killed after the tables and figures were written, before index.html

    monkeypatch.setattr(write, "to_html", dies)
    with pytest.raises(KeyboardInterrupt):
        write_report(store, "cat", out)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # every table, figure and page of the old report, nothing half-new
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report")] == []
    monkeypatch.setattr(write, "to_html", render.to_html)
    write_report(store, "cat", out)
    assert (out / "mine.txt").read_text() == "the user's own file" and (out / "index.html").exists()


def test_a_merge_that_fails_half_way_leaves_no_output_or_the_old_one(tmp_path, monkeypatch):
    import sys

    from attnbench.store.database import Store
    from attnbench.store.merge import merge_stores

    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    assert _main(["run", str(_suite(tmp_path, suite_text())), "--store", str(a), "--no-report"]) == 0
    assert (
        _main(
            [
                "run",
                str(_suite(tmp_path, suite_text().replace("name: cat", "name: dog"))),
                "--store",
                str(b),
                "--no-report",
            ]
        )
        == 0
    )
    merge = sys.modules["attnbench.store.merge"]
    real, calls = merge._merge_runs, []

    def dies_on_second(out, src, label, report):
        calls.append(label)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed after the first input was merged
        real(out, src, label, report)

    monkeypatch.setattr(merge, "_merge_runs", dies_on_second)
    new = tmp_path / "all.sqlite"
    with pytest.raises(KeyboardInterrupt):
        merge_stores(new, [a, b])
    assert not new.exists() and [p for p in tmp_path.iterdir() if p.name.startswith(".all.sqlite")] == []
    monkeypatch.setattr(merge, "_merge_runs", real)
    merge_stores(new, [a])
    monkeypatch.setattr(merge, "_merge_runs", dies_on_second)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        merge_stores(new, [b, a])
    with Store(new) as store:
        assert {r["suite"] for r in store.runs()} == {"cat"}  # the earlier merge, whole; none of b's runs
    monkeypatch.setattr(merge, "_merge_runs", real)
    merge_stores(new, [b])
    with Store(new) as store:
        assert {r["suite"] for r in store.runs()} == {"cat", "dog"}


def test_defaults_apply_only_to_the_kinds_that_take_them(tmp_path):
    """issue 28, item 5: defaults.train / defaults.data / defaults.grid merged into a speed
    experiment used to be refused as keys the user never wrote there."""
    body = (
        suite_text()
        + """
  - name: sp
    kind: speed
    variants: [softmax]
    speed: {lengths: [32], modes: [forward]}
"""
    )
    body = body.replace("defaults:\n", "defaults:\n  grid: {lr: [1.0e-2, 2.0e-2]}\n")
    assert _main(["validate", str(_suite(tmp_path, body))]) == 0


# --- Issue 28 (part 1): the report with variants that declare different facts, options as rows,
# atomic writes, slope fits with too few points, one version. ---------------------------------

DECLARED = """
version: 1
name: declared
defaults:
  model: {d_model: 16, n_layer: 1, n_head: 2}
experiments:
  - name: e
    kind: train
    variants: [softmax, full, bare]
    seeds: [0, 1]
    data: {source: builtin, test_fraction: 0.1}
    train: {batch_size: 2, seq_len: 32, lr: 1.0e-2, warmup_steps: 1, budget: {steps: 2}, eval_tokens: 256,
            checkpoint: false}
"""


def _declared_plugins(tmp_path: Path, monkeypatch) -> None:
    """`full` (every optional fact) and `bare` (none) through a real entry point, in-process."""
    from tests.helpers import fake_distribution

    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "declared-dist", "declared", module="tests.declared_variants")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("ATTNBENCH_PLUGINS", "softmax,declared")
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)


def test_report_renders_facts_a_variant_does_not_declare(tmp_path, monkeypatch, capsys):
    import pandas as pd

    _declared_plugins(tmp_path, monkeypatch)
    store = tmp_path / "st.sqlite"
    assert _main(["run", str(_suite(tmp_path, DECLARED)), "--store", str(store)]) == 0, capsys.readouterr().err
    report = tmp_path / "reports" / "declared"
    assert (report / "index.html").is_file() and (report / "figures" / "e-budget-d16_L1_H2.png").is_file()
    assert _main(["report", "--store", str(store), "--out", str(tmp_path / "again")]) == 0
    cost = pd.read_csv(report / "tables" / "e-cost.csv").set_index("variant")
    assert cost["fwd_flops_per_token"]["full"] > 0 and pd.isna(cost["fwd_flops_per_token"]["bare"])
    md = (report / "report.md").read_text()
    bare = next(line for line in md.splitlines() if line.startswith("| bare | d16 L1 H2 | 7,"))
    assert bare.count("not declared") == 2  # state size and FLOPs per token
    summary = next(line for line in md.splitlines() if line.startswith("| e | bare |"))
    assert "not declared" in summary  # state size in the comparison


def test_distribution_version_is_the_package_version():
    """Before: pyproject said 0.1.0 while attnbench.__version__ said 0.2.0, and the report showed both."""
    import importlib.metadata

    import attnbench

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "attnbench.__version__"}
    assert importlib.metadata.version("attnbench") == attnbench.__version__


def test_a_slope_through_two_points_is_shown_as_no_fit(tmp_path, capsys):
    """Before: "2.52 (2 points: no interval)", unflagged beside flagged 3-point fits. After: the
    finalizer stores no slope for 2 points, and the report shows none, for new and old rows."""
    from attnbench.experiments.speed.fits import Curves, fit_results
    from attnbench.store.database import Result, RunRecord, Store

    curves: Curves = {
        ("decode", "memory"): {64: 1.0e6, 128: 5.7e6},
        ("decode", "time"): {64: 1e-3, 128: 2e-3, 256: 4e-3},
    }
    rows = fit_results(curves, None, 0, "cpu:test", {"model": 0}, with_crossover=False)
    slope = {r.tags["quantity"]: r for r in rows}
    assert slope["memory"].value is None and slope["memory"].tags["error"].startswith("2 points: too few to fit")
    assert slope["time"].value is not None and abs(slope["time"].value - 1.0) < 1e-9  # 3 points: a fit
    old = Result(
        "slope",
        2.52,
        "",
        {"mode": "forward", "quantity": "memory", "model": 0, "ci95": None, "n_points": 2, "T_min": 64, "T_max": 128},
    )  # stored before the rule
    with Store(tmp_path / "st.sqlite") as store:
        points = [
            Result(name, v * T, unit, {"mode": mode, "T": T, "status": "ok"})
            for T in (64, 128)
            for mode in ("forward", "decode")
            for name, unit, v in (("time_s", "s", 1e-5), ("peak_memory_bytes", "B", 1e4))
        ]
        for key, kind, variant, results in (
            ("s1", "speed", "linear", points),
            ("s2", "speed", "heinsen", points),
            ("f1", "speed_fit", "linear", rows),
            ("f2", "speed_fit", "heinsen", [old]),
        ):
            store.save_run(
                RunRecord(
                    cell_key=key,
                    suite="sp",
                    experiment="sp",
                    kind=kind,
                    variant=variant,
                    status="done",
                    seed=None,
                    coords={"variant": variant, "model": 0},
                    config={},
                    provenance={},
                    summary={},
                    started_at=1.0,
                    finished_at=2.0,
                    results=results,
                )
            )
    assert _main(["report", "--store", str(tmp_path / "st.sqlite"), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.count("no fit (2 points: too few to fit (a slope needs 3))") == 2
    assert "2.52" not in md and "5.7" not in md and "no interval" not in md


def _small_store(path: Path, suite: str = "small", loss: float = 3.0) -> Path:
    """A store with one train run (a curve, so the report has figures and tables)."""
    from attnbench.store.database import Metric, RunRecord, Store

    with Store(path) as store:
        for variant in ("softmax", "linear"):
            curve = [
                Metric(s, s * 64, s * 0.1, name, loss + 1 / s) for s in (5, 10) for name in ("train/loss", "val/loss")
            ]
            store.save_run(
                RunRecord(
                    cell_key=f"{suite}-{variant}-{loss}",
                    suite=suite,
                    experiment="lm",
                    kind="train",
                    variant=variant,
                    status="done",
                    seed=0,
                    coords={"variant": variant, "model": 0, "d_model": 16, "n_layer": 1, "seed": 0},
                    config={"model": {"d_model": 16, "n_layer": 1, "n_head": 2}},
                    provenance={},
                    summary={"val_loss": loss, "n_params": 100, "steps": 10, "tokens": 640},
                    started_at=1.0,
                    finished_at=2.0,
                    metrics=curve,
                )
            )
    return path


OPTIONS = """
version: 1
name: opts
defaults:
  model: {d_model: 16, n_layer: 1, n_head: 2}
experiments:
  - name: e
    kind: train
    variants: [softmax, linear]
    seeds: [0, 1]
    data: {source: builtin, test_fraction: 0.1}
    train: {batch_size: 2, seq_len: 32, lr: 1.0e-2, warmup_steps: 1, budget: {steps: 2}, eval_tokens: 256,
            checkpoint: false}
"""


def test_runs_with_different_variant_options_are_separate_rows(tmp_path, monkeypatch, capsys):
    """Before: the two settings of `linear` went into one row, its point chosen over both
    pooled (n=4 from 2 seeds), the summary pairing whichever ran later. After: one row each,
    labelled by the option that differs, each over its own 2 seeds."""
    import pandas as pd

    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    suite, store = str(_suite(tmp_path, OPTIONS)), str(tmp_path / "st.sqlite")
    assert _main(["run", suite, "--store", store, "--no-report"]) == 0
    assert (
        _main(
            [
                "run",
                suite,
                "--store",
                store,
                "--set",
                "experiments.e.variant_options.linear.feature_map=relu",
                "--no-report",
            ]
        )
        == 0
    )
    assert _main(["report", "--store", store, "--out", str(tmp_path / "rep")]) == 0
    rows = pd.read_csv(tmp_path / "rep" / "tables" / "e-variants.csv").set_index("variant")
    assert sorted(rows.index) == ["linear (feature_map=elu)", "linear (feature_map=relu)", "softmax"]
    assert (rows["seeds"] == 2).all() and (rows["seeds_done"] == 2).all() and (rows["grid_points_tried"] == 1).all()
    summary = pd.read_csv(tmp_path / "rep" / "tables" / "summary.csv").set_index("variant")
    assert (
        sorted(summary.index) == sorted(rows.index) and (summary.drop(index="softmax")["n"] == 2).all()
    )  # paired: 2 seeds each
    test_loss = summary["test_loss_mean"]
    assert test_loss["linear (feature_map=elu)"] != test_loss["linear (feature_map=relu)"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| e | linear (feature\\_map=relu) |" in md and "(n=4)" not in md


GRID_OPTIONS = OPTIONS.replace(
    "    seeds: [0, 1]\n",
    "    seeds: [0, 1]\n    protocol: {baseline: softmax}\n"
    "    grid: {variant_options.linear.feature_map: [elu, relu]}\n",
)


@pytest.mark.parametrize(
    "grid, names",
    [
        (
            "{variant_options.linear.feature_mapp: [elu, relu]}",
            ["grid.variant_options.linear.feature_mapp", "unknown option(s) ['feature_mapp']", "feature_map"],
        ),
        (
            "{variant_options.linear.feature_map: [elu, nope]}",
            ["grid.variant_options.linear.feature_map", "'nope'", "relu"],
        ),
        ("{variant_options.additive.feature_map: [elu, relu]}", ["'additive'", "does not run", "add it to 'variants'"]),
        ("{variant_options.linear: [elu, relu]}", ["variant_options.VARIANT.OPTION", "grid"]),
    ],
    ids=["unknown-option", "bad-value", "variant-not-run", "no-option-named"],
)
def test_a_grid_over_variant_options_is_checked_at_load(tmp_path, capsys, grid, names):
    text = GRID_OPTIONS.replace("{variant_options.linear.feature_map: [elu, relu]}", grid)
    assert _main(["validate", str(_suite(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "s.yaml:" in err
    for needle in names:
        assert needle in err, err


def test_a_grid_sweeps_a_variant_option_under_the_protocol(tmp_path, monkeypatch, capsys):
    """New: grid keys variant_options.VARIANT.OPTION. Each value is its own cell (its own key),
    only for that variant; the protocol chooses among them on validation loss."""
    import pandas as pd

    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    suite, store = str(_suite(tmp_path, GRID_OPTIONS)), tmp_path / "st.sqlite"
    assert _main(["run", suite, "--store", str(store), "--no-report"]) == 0
    assert "6 cells, 6 run" in capsys.readouterr().out  # softmax x 2 seeds + linear x 2 options x 2 seeds
    assert _main(["report", "--store", str(store), "--out", str(tmp_path / "rep")]) == 0
    grid = pd.read_csv(tmp_path / "rep" / "tables" / "e-grid.csv")
    linear = grid[grid["variant"] == "linear"].set_index("grid_point")
    assert sorted(linear.index) == ["feature_map=elu", "feature_map=relu"] and (linear["seeds_done"] == 2).all()
    best = str(linear["mean_loss"].idxmin())  # a grid point's name
    assert linear["chosen"][best] and not linear.drop(index=best)["chosen"].any()
    summary = pd.read_csv(tmp_path / "rep" / "tables" / "summary.csv").set_index("variant")
    assert summary.loc["linear", "chosen_point"] == best and summary.loc["linear", "n"] == 2
    import sqlite3

    with sqlite3.connect(store) as db:
        keys = {r[0] for r in db.execute("SELECT cell_key FROM runs WHERE variant = 'linear'")}
        options = {
            r[0]
            for r in db.execute(
                "SELECT json_extract(config, '$.model.options.feature_map') FROM runs WHERE variant = 'linear'"
            )
        }
    assert len(keys) == 4 and options == {"elu", "relu"}
