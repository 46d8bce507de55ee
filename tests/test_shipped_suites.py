"""Suites ship inside the package: a bare name (`quick`, `quick.yaml`) is the shipped suite
from any folder, a path still wins, an unknown name lists the shipped ones, `attnbench
suites` lists them with description and measured wall time, and all of it works from an
installed wheel (built here, offline, into a fresh virtual environment)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnbench.cli import main
from tests.helpers import REPO, write_suite

SHIPPED = sorted(p.stem for p in (REPO / "suites").glob("*.yaml"))
LOCAL = """
version: 1
name: local
experiments:
  - name: one
    kind: train
    variants: [softmax]
    models: [{d_model: 16, n_layer: 1, n_head: 2}]
    train: {budget: {steps: 2}, batch_size: 2, seq_len: 16}
"""


def _attnbench(*args: str, cwd: Path, exe: str = "attnbench", env: dict[str, str | None] | None = None):
    """The console script run from ``cwd`` (not the repository), so only shipped files can match a name;
    ``env`` entries of None are removed."""
    full = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, timeout=300, env=full)


@pytest.fixture
def cli(monkeypatch, capsys):
    """``cli(folder, *argv) -> (exit code, stdout, stderr)``: the CLI's entry point in this
    process (fast), run from ``folder`` so only shipped files can match a bare name."""

    def call(folder: Path, *argv: str) -> tuple[int, str, str]:
        monkeypatch.chdir(folder)
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return call


def _columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_a_bare_name_is_the_shipped_suite_and_an_existing_path_wins(tmp_path, cli):
    write_suite(tmp_path / "quick.yaml", LOCAL)  # a local file of the same name as the shipped quick
    code, out, err = cli(tmp_path, "validate", "quick.yaml")
    assert code == 0, err
    assert out.startswith("quick.yaml: ok (1 experiments, 1 cells)")  # the file, not the shipped suite
    code, out, err = cli(tmp_path, "validate", "quick")
    assert code == 0, err
    assert out.startswith(f"quick ({REPO / 'suites' / 'quick.yaml'}): ok (3 experiments")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = cli(empty, "validate", "lm-eval.yaml")  # its task folder and held-out text resolve
    assert code == 0, err
    assert out.startswith(f"lm-eval.yaml ({REPO / 'suites' / 'lm-eval.yaml'}): ok (2 experiments")


def test_an_unknown_name_or_missing_path_is_a_clear_error_listing_the_shipped_suites(tmp_path, cli):
    code, out, err = cli(tmp_path, "validate", "quikc")
    assert code == 2 and "Traceback" not in err
    assert err.startswith(
        f"attnbench: error: suite file quikc not found in {tmp_path}, and no shipped suite "
        "is named 'quikc'; did you mean 'quick'?"
    )
    assert err.rstrip().endswith("shipped suite's name: " + ", ".join(SHIPPED))
    code, out, err = cli(tmp_path, "run", "nowhere/quick.yaml", "--store", str(tmp_path / "s.sqlite"))
    assert code == 2 and "Traceback" not in err
    assert err.rstrip() == (
        f"attnbench: error: suite file nowhere/quick.yaml not found (looked at "
        f"{tmp_path / 'nowhere' / 'quick.yaml'}); give an existing suite YAML file, "
        "or a shipped suite's name without a folder: " + ", ".join(SHIPPED)
    )
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store is touched


def test_suites_lists_every_shipped_suite_with_its_description(tmp_path, cli):
    code, out, err = cli(tmp_path, "suites", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [s["name"] for s in listed] == SHIPPED
    for item in listed:
        raw = yaml.safe_load(Path(item["path"]).read_text())
        assert item["description"] == raw["description"] and item["description"]
        assert Path(item["path"]) == REPO / "suites" / f"{item['name']}.yaml"
    code, out, err = cli(tmp_path, "suites")
    assert code == 0, err
    lines = out.splitlines()
    assert _columns(lines[0]) == ["suite", "wall time", "description"]
    rows = [_columns(line) for line in lines[1 : len(SHIPPED) + 1]]
    assert [(name, desc) for name, _, desc in rows] == [(s["name"], s["description"]) for s in listed]
    for (_, wall, _), item in zip(rows, listed, strict=True):
        if item["wall_time_s"] is None:
            assert wall == ("GPU" if item["gpu"] else "not measured")
        else:
            assert re.fullmatch(r"(over )?(\d+:)?\d+:\d\d", wall) and wall.startswith("over") == item["wall_time_over"]
    assert f"files: {REPO / 'suites'} (lm-eval tasks: {REPO / 'suites' / 'lm_eval_tasks'})" in out


def test_suites_reads_measured_wall_times_from_the_header(tmp_path, cli):
    folder = tmp_path / "mine"
    folder.mkdir()
    write_suite(
        folder / "timed.yaml",
        "# A timed suite.\n# Wall time (idle 2-core CPU, 2026-11-25): 7:06\n"
        + LOCAL.replace("name: local", "name: timed\ndescription: Timed on purpose."),
    )
    write_suite(folder / "long.yaml", "# Hours of GPU.\n#\n# wall time: 1:02:03\n" + LOCAL)
    write_suite(folder / "plain.yml", "#\n#   First words of the header.\n# Wall time: about ten minutes\n" + LOCAL)
    write_suite(folder / "bound.yaml", "# Too long to run whole.\n# Wall time (subsets below): over 2:00:00\n" + LOCAL)
    write_suite(folder / "card.yaml", "# For a GPU.\n# Wall time: GPU\n" + LOCAL)
    write_suite(folder / "cuda.yaml", "# Names its device.\n" + LOCAL + "device: cuda\n")
    code, out, err = cli(tmp_path, "suites", str(folder), "--json")
    assert code == 0, err
    got = {
        s["name"]: (s["description"], s["wall_time_s"], s["wall_time_note"], s["wall_time_over"], s["gpu"])
        for s in json.loads(out)
    }
    assert got == {
        "bound": ("Too long to run whole.", 7200, "subsets below", True, False),
        "card": ("For a GPU.", None, "", False, True),
        "cuda": ("Names its device.", None, "", False, True),
        "long": ("Hours of GPU.", 3723, "", False, False),
        "plain": ("First words of the header.", None, "", False, False),  # no M:SS: not a measurement
        "timed": ("Timed on purpose.", 426, "idle 2-core CPU, 2026-11-25", False, False),
    }
    code, out, err = cli(tmp_path, "suites", str(folder))
    assert [_columns(line) for line in out.splitlines()] == [
        ["suite", "wall time", "description"],
        ["bound", "over 2:00:00", "Too long to run whole."],
        ["card", "GPU", "For a GPU."],
        ["cuda", "GPU", "Names its device."],
        ["long", "1:02:03", "Hours of GPU."],
        ["plain", "not measured", "First words of the header."],
        ["timed", "7:06", "Timed on purpose."],
    ]
    code, out, err = cli(tmp_path, "suites", str(tmp_path / "nope"))
    assert code == 2 and err.startswith(f"attnbench: error: {tmp_path / 'nope'} is not a folder")


def test_an_lm_eval_path_that_does_not_exist_is_refused_at_validate(tmp_path, cli):
    suite = (
        (REPO / "suites" / "lm-eval.yaml")
        .read_text()
        .replace("include_path: lm_eval_tasks", f"include_path: {REPO / 'suites' / 'lm_eval_tasks'}")
    )
    write_suite(tmp_path / "lm.yaml", suite)
    code, out, err = cli(tmp_path, "validate", "lm.yaml")  # the held-out text is looked for beside this copy
    assert code == 2 and "Traceback" not in err
    line = next(i + 1 for i, text in enumerate(suite.splitlines()) if "text_path" in text)
    assert err.strip() == (
        f"attnbench: error: {tmp_path / 'lm.yaml'}:{line}: experiments[1].lm_eval.paths."
        f"text_path: file {tmp_path / 'lm_eval_tasks' / 'heldout_python.txt'} does not "
        "exist (paths are relative to the suite file)"
    )


# -- from a wheel ------------------------------------------------------------------------


def _dependency_dirs() -> list[str]:
    """Where this interpreter finds attnbench's dependencies, minus the checkout's own folders
    (a venv inside the checkout, as CI's .venv is, still counts: its site-packages are deps)."""

    def ours(path: Path) -> bool:
        return path.is_relative_to(REPO) and "site-packages" not in path.parts

    return [p for p in sys.path if p and Path(p).is_dir() and not ours(Path(p).resolve())]


def _build_wheel(tmp_path: Path) -> Path:
    import setuptools

    if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (70, 1):
        message = f"setuptools {setuptools.__version__} cannot build a wheel offline; the test extra needs >= 70.1"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    src = tmp_path / "src"  # a copy, so the build writes nothing into the checkout
    for name in ("pyproject.toml", "README.md"):
        src.mkdir(exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    for name in ("harness", "plugins", "suites"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(src),
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "dist").glob("attnbench-*.whl")
    return wheel


@pytest.mark.slow
def test_an_installed_wheel_runs_shipped_suites_from_an_empty_folder(tmp_path):
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "_deps.pth").write_text("\n".join(_dependency_dirs()) + "\n")  # dependencies, not attnbench
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HF_HOME": str(tmp_path / "hf"),
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
        "PYTHONPATH": None,
    }
    exe = str(venv / "bin" / "attnbench")
    installed = Path(site) / "attnbench" / "suites"
    quick = _attnbench("validate", "quick", cwd=empty, exe=exe, env=env)
    assert quick.returncode == 0, quick.stderr
    assert quick.stdout.startswith(f"quick ({installed / 'quick.yaml'}): ok (3 experiments")
    lm_eval = _attnbench("validate", "lm-eval.yaml", cwd=empty, exe=exe, env=env)  # task folder and text shipped
    assert lm_eval.returncode == 0, lm_eval.stderr
    listed = _attnbench("suites", "--json", cwd=empty, exe=exe, env=env)
    assert listed.returncode == 0, listed.stderr
    assert [(s["name"], Path(s["path"])) for s in json.loads(listed.stdout)] == [
        (name, installed / f"{name}.yaml") for name in SHIPPED
    ]
    tasks = sorted(p.name for p in (installed / "lm_eval_tasks").iterdir() if p.is_file())
    assert tasks == sorted(p.name for p in (REPO / "suites" / "lm_eval_tasks").iterdir() if p.is_file())
    assert list(empty.iterdir()) == []  # nothing written where it ran
