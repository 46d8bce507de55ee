"""Issue 66, the general guard: every CLI command, driven over a corpus of damaged stores and
suites a new user can write, ends with a message or a result, never a traceback."""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from attnbench.cli import main
from attnbench.store.database import Store
from tests.report_store import write_store

TINY = """version: 1
name: guard
device: cpu
experiments:
  - name: t
    kind: train
    variants: [softmax]
    seeds: [0]
    data: {source: builtin, max_bytes: 50000}
    models: [{d_model: 16, n_layer: 1, n_head: 2}]
    train: {batch_size: 2, seq_len: 16, budget: {steps: 4}, eval_interval: 2, eval_tokens: 64, checkpoint: false}
"""
WINDOW = (
    TINY.replace("    train:", "    protocol: {interval: false, tuning: {seeds: [0], budget: {steps: 2}}}\n    train:")
    + "    grid: {lr: GRID}\n"
)
SCALING = """version: 1
name: guard-scaling
experiments:
  - name: s
    kind: scaling
    variants: [softmax]
    data: {source: builtin, max_bytes: 50000}
    models: MODELS
    scaling: {RULE, batch_size: 2, seq_len: 16}
"""
FOUR = "[{d_model: 16}, {d_model: 24}, {d_model: 32}, {d_model: 48}]"
HEADS = "[{d_model: 32, n_head: 1}, {d_model: 32, n_head: 2}, {d_model: 32, n_head: 4}, {d_model: 32, n_head: 8}]"
SUITES = {
    "factor-1.0001": WINDOW.replace("GRID", "{start: [1.0e-3, 2.0e-3], factor: 1.0001, bounds: [9.9e-4, 5.0e-2]}"),
    "bool-start": WINDOW.replace("GRID", "{start: [true, 2.0], bounds: [0.5, 3.0]}"),
    "margin-inf": SCALING.replace("RULE", "tokens_per_param: 1, exponent_margin: .inf").replace("MODELS", FOUR),
    "tokens-inf": SCALING.replace("RULE", "flops_per_param: .inf").replace("MODELS", FOUR),
    "heads-only": SCALING.replace("RULE", "tokens_per_param: 1").replace("MODELS", HEADS),
    "not-yaml": "version: 1\nname: [unclosed\n",
}


def _sql(path: Path, sql: str) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(sql)
    db.close()


def _stores(root: Path) -> dict[str, Path]:
    out = {"not-sqlite": root / "text.sqlite", "empty-file": root / "empty.sqlite", "folder": root / "folder"}
    out["not-sqlite"].write_text("hello")
    out["empty-file"].write_bytes(b"")
    out["folder"].mkdir()
    for name, sql in {
        "summary-truncated": "UPDATE runs SET summary = '{\"val_loss\": 2.1' WHERE id = (SELECT MIN(id) FROM runs)",
        "config-empty": "UPDATE runs SET config = '' WHERE id IN (SELECT id FROM runs LIMIT 3)",
        "coords-not-json": "UPDATE runs SET coords = 'x' WHERE kind = 'speed'",
        "tags-damaged": "UPDATE results SET tags = '[' WHERE rowid IN (SELECT rowid FROM results LIMIT 5)",
    }.items():
        out[name] = write_store(root / f"{name}.sqlite")
        _sql(out[name], sql)
    leased = root / "lease.sqlite"
    Store(leased).close()
    now = time.time()
    _sql(
        leased,
        "INSERT INTO leases (cell_key, pid, host, machine, process_start, started_at, heartbeat_at) "
        f"VALUES ('k', 'x', 'elsewhere', 'm', '', {now}, 'not a number'), "
        f"('k2', 7, 'elsewhere', 'm', '', {now}, {now + 86400})",
    )
    out["lease-unreadable"] = leased
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    root = tmp_path_factory.mktemp("guard")
    suites = {}
    for name, body in SUITES.items():
        suites[name] = root / f"{name}.yaml"
        suites[name].write_text(body)
    return root, _stores(root), suites


GUARD_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "ATTNBENCH_PLUGINS": "softmax"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command in this process (the CLI's one error layer included), its output captured: an
    exception that escapes ``main`` fails the test as a traceback would reach the user. In process,
    not a subprocess per command: 66 commands, each importing torch, took minutes."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in GUARD_ENV}
    here = os.getcwd()
    os.environ.update(GUARD_ENV)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's refusals
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(here)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    said = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in said, said[-3000:]
    assert proc.returncode in (0, 1, 2), (proc.returncode, said[-3000:])


STORE_COMMANDS = {
    "report": lambda s, out: ["report", "--store", str(s), "--out", str(out)],
    "checkpoints": lambda s, out: ["checkpoints", "--store", str(s)],
    "store-check": lambda s, out: ["store", "check", str(s)],
    "store-merge": lambda s, out: ["store", "merge", str(out / "merged.sqlite"), str(s)],
    "export-best": lambda s, out: ["export", "--best", "softmax", "--store", str(s), str(out / "hf")],
    "run-on-it": lambda s, out: ["run", str(out.parent / "tiny.yaml"), "--store", str(s), "--no-report", "--jobs", "1"],
}
STORE_NAMES = [
    "not-sqlite",
    "empty-file",
    "folder",
    "summary-truncated",
    "config-empty",
    "coords-not-json",
    "tags-damaged",
    "lease-unreadable",
]


@pytest.mark.parametrize("store", STORE_NAMES)
def test_no_command_on_a_damaged_store_shows_a_traceback(corpus, store: str, tmp_path: Path) -> None:
    _, stores, _ = corpus
    (tmp_path / "tiny.yaml").write_text(TINY)
    for name, make in STORE_COMMANDS.items():
        out = tmp_path / name
        out.mkdir()
        proc = _cli(*make(stores[store], out), cwd=tmp_path)
        _no_traceback(proc)


@pytest.mark.parametrize("suite", list(SUITES))
def test_no_command_on_a_bad_suite_shows_a_traceback(corpus, suite: str, tmp_path: Path) -> None:
    _, _, suites = corpus
    for args in (
        ["validate", str(suites[suite])],
        ["validate", "--no-build", str(suites[suite])],
        ["run", str(suites[suite]), "--store", str(tmp_path / "s.sqlite"), "--no-report"],
    ):
        proc = _cli(*args, cwd=tmp_path)
        _no_traceback(proc)
        counted = suite == "heads-only" and "--no-build" in args  # parameters are counted on a built model
        assert proc.returncode != 0 or counted, f"{suite}: {args[0]} accepted it"
    assert not (tmp_path / "s.sqlite").exists()  # a refused run creates nothing


def test_no_other_command_on_damaged_input_shows_a_traceback(corpus, tmp_path: Path) -> None:
    root, stores, _ = corpus
    for args in (
        ["inspect", str(stores["not-sqlite"]), "--text", "hi"],
        ["export", str(stores["not-sqlite"]), str(tmp_path / "hf")],
        ["check", "nonexistent-variant"],
        ["list"],
        ["suites"],
        ["bench", "--variants", "softmax", "--lengths", "x"],
    ):
        _no_traceback(_cli(*args, cwd=tmp_path))
