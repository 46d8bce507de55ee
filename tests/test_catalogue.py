"""The catalogue of bad input: each case through the CLI, asserting a non-zero exit, no
traceback, and a message that names the file/key/option and the fix. Validate-level
(nothing trains) wherever the fault can be found there."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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


CASES = [
    Case("budget-seconds-inf", _validate(suite_text(budget="{seconds: .inf}")),
         ["s.yaml:", "budget.seconds", "finite"]),
    Case("budget-flops-nan", _validate(suite_text(budget="{flops: .nan}")), ["s.yaml:", "budget.flops"]),
    Case("duplicate-key", _validate(suite_text().replace("  train: {batch_size", "  model: {d_model: 32}\n  train: {batch_size")),
         ["s.yaml:6", "'model' appears twice", "first at line 4", "Keep one"]),
    Case("duplicate-experiment-key", _validate(suite_text().replace("    kind: train\n", "    kind: train\n    kind: speed\n")),
         ["s.yaml:10", "'kind' appears twice", "first at line 9"]),
    Case("empty-suite-file", lambda tmp: ["validate", str(_suite(tmp, ""))], ["s.yaml:1", "empty", "version: 1"]),
    Case("binary-suite-file", lambda tmp: ["validate", str(_write(tmp / "s.yaml", b"\x89PNG\r\n\x1a\n\xff\xfe"))],
         ["s.yaml", "UTF-8", ".yaml"]),
    Case("missing-suite-file", lambda tmp: ["validate", str(tmp / "nope.yaml")], ["nope.yaml", "not found"]),
    Case("misspelt-key", _validate(suite_text().replace("warmup_steps", "warmup_stepz")),
         ["s.yaml:", "warmup_stepz", "correct its spelling"]),
    Case("unknown-variant", _validate(suite_text().replace("[softmax]", "[softmaks]")),
         ["s.yaml:", "softmaks", "softmax"]),
    Case("empty-data-file", _data_file(b""), ["corpus.txt", "empty", "data.path"]),
    Case("binary-data-file", _data_file(bytes(range(256)) * 40), ["corpus.txt", "not UTF-8", "data.path"]),
    Case("data-file-too-small", _data_file(b"hello world\n" * 20),
         ["corpus.txt", "240 bytes", "needs at least 2560 bytes", "seq_len"]),
    Case("missing-data-file", _data_file(b"x", extra=", val_path: gone.txt"), ["gone.txt", "does not exist", "data.val_path"]),
    Case("plugins-env-unknown", lambda tmp: ["list"], ["ATTNBENCH_PLUGINS", "nosuch", "installed:", "softmax"],
         env={"ATTNBENCH_PLUGINS": "softmax,nosuch"}),
    Case("variants-not-in-suite", lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(tmp / "st.sqlite"),
                                               "--variants", "linear", "--no-report"],
         ["--variants", "linear", "does not run", "softmax"]),
    Case("device-tpu", lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(tmp / "st.sqlite"),
                                    "--device", "tpu"], ["'tpu'", "--device", "cpu"]),
    Case("check-long-T-zero", lambda tmp: ["check", "softmax", "--long-T", "0", "--store", str(tmp / "st.sqlite")],
         ["--long-T", "above 0"]),
    Case("check-time-limit-inf", lambda tmp: ["check", "softmax", "--time-limit", "inf", "--store", str(tmp / "st.sqlite")],
         ["--time-limit", "finite"]),
    Case("store-not-sqlite", lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(_write(tmp / "notes.txt", b"mine"))],
         ["notes.txt", "not a SQLite database", "--store"]),
    Case("store-check-missing", lambda tmp: ["store", "check", str(tmp / "gone.sqlite")], ["gone.sqlite", "no results store"]),
    Case("merge-input-missing", lambda tmp: ["store", "merge", str(tmp / "out.sqlite"), str(tmp / "gone.sqlite")],
         ["gone.sqlite", "not found"]),
    # issue 28, item 4: accepted silently before
    Case("variants-empty", lambda tmp: ["run", str(_suite(tmp, suite_text())), "--store", str(tmp / "st.sqlite"),
                                        "--variants", ""], ["--variants ''", "names nothing", "leave the option out"]),
    Case("plugins-env-empty", lambda tmp: ["list"], ["ATTNBENCH_PLUGINS", "names no plugin", "unset it"],
         env={"ATTNBENCH_PLUGINS": " , "}),
    Case("plugins-env-hides-task", _validate(suite_text(
        data="{source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 64, num_kv_pairs: 4}}")),
         ["unknown task 'mqar'", "ATTNBENCH_PLUGINS='softmax'", "unset it"], env={"ATTNBENCH_PLUGINS": "softmax"}),
]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _main(argv: list[str]) -> int:
    """The CLI's entry point in this process (fast); any exception it lets out fails the test."""
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_a_clear_message(tmp_path, case, capsys, monkeypatch):
    for key, value in {**OFFLINE, **(case.env or {})}.items():
        monkeypatch.setenv(key, value)
    code = _main(case.setup(tmp_path))
    out, err = capsys.readouterr()
    assert code == case.code, (code, out, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out
    for needle in case.names:
        assert needle in err, f"{needle!r} not in: {err}"


def test_a_bad_input_through_the_installed_command_prints_no_traceback(tmp_path):
    proc = run_cli("validate", str(_suite(tmp_path, suite_text(budget="{seconds: .inf}"))), env=OFFLINE)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "budget.seconds" in proc.stderr


def test_cuda_without_cuda_is_refused_by_name(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = run_cli("run", str(_suite(tmp_path, suite_text())), "--store", str(tmp_path / "st.sqlite"),
                   "--device", "cuda", env=OFFLINE)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.search(r"device 'cuda' is not available on this machine; use one of: auto, cpu", proc.stderr)


def test_suites_whose_names_differ_only_in_dropped_characters_get_their_own_report_folders(tmp_path):
    from attnbench.report.write import folder_name

    assert folder_name("plain-name") == "plain-name"
    a, b = folder_name("exp/1"), folder_name("exp?1")
    assert a != b and a.startswith("exp_1-") and b.startswith("exp_1-")


# -- issue 28: the report with variants that declare different optional facts ---------------
BARE_PLUGIN = '''
import torch
from torch import nn
from attnbench import ModelConfig, Variant, hookimpl, mark_residual


class Mean(nn.Module):
    """Causal mean pooling; declares nothing optional (no state size, FLOPs, decoding)."""

    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.proj = mark_residual(nn.Linear(config.d_model, config.d_model))

    def forward(self, x):
        steps = torch.arange(1, x.size(1) + 1, device=x.device, dtype=x.dtype)[:, None]  # (T, 1)
        return self.proj(x.cumsum(1) / steps)  # (B, T, D)


@hookimpl
def attnbench_register_variants(register):
    register(Variant(name="bare-mean", build_mixer=Mean, description="declares no optional fact"))
'''


def test_a_variant_that_declares_no_optional_fact_beside_one_that_declares_all_gets_a_full_report(tmp_path):
    from tests.helpers import fake_distribution

    (tmp_path / "dist").mkdir()
    env = {**OFFLINE, **fake_distribution(tmp_path / "dist", "bare-dist", "bare", BARE_PLUGIN, module="bare_plugin"),
           "MPLCONFIGDIR": str(tmp_path / "mpl")}
    suite = _suite(tmp_path, suite_text(data="{source: builtin, val_fraction: 0.05, test_fraction: 0.05}")
                   .replace("[softmax]", "[softmax, bare-mean]")
                   .replace("train: {budget: {steps: 2}}", "train: {budget: {steps: 2}, eval_interval: 2, "
                            "checkpoint: false}\n    protocol: {tune: false, interval: false}"))
    store, out = tmp_path / "st.sqlite", tmp_path / "report"
    proc = run_cli("run", str(suite), "--store", str(store), "--no-report", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_cli("report", "--store", str(store), "--suite", "cat", "--out", str(out), env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    page = (out / "index.html").read_text()
    assert "bare-mean" in page and "not declared" in page


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
    assert _main(["run", str(_suite(tmp_path, suite_text().replace("name: cat", "name: dog"))), "--store", str(b),
                  "--no-report"]) == 0
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
    assert not new.exists() and [p for p in tmp_path.iterdir() if ".merging" in p.name] == []
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
    body = suite_text() + """
  - name: sp
    kind: speed
    variants: [softmax]
    speed: {lengths: [32], modes: [forward]}
"""
    body = body.replace("defaults:\n", "defaults:\n  grid: {lr: [1.0e-2, 2.0e-2]}\n")
    assert _main(["validate", str(_suite(tmp_path, body))]) == 0
