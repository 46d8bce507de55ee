"""Issue 57 items 9 and 15 (gpu_check.sh): every argument of scripts/gpu_check.sh is checked
before anything is installed, made or run, with one clear line; its torch floor is pyproject's.
No GPU needed: the arguments are parsed only (``--parse-only``, or refused before any step)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from benchmarks.gpu_check import driver
from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"


class WouldRun(Exception):
    """Raised where the check would start its steps."""


@pytest.fixture
def no_steps(monkeypatch):
    def refuse(*args, **kwargs):
        raise WouldRun(args)

    monkeypatch.setattr(driver, "run_steps", refuse)
    monkeypatch.setattr(driver, "write_summary", refuse)


BAD = [
    (["--budget", "0"], "0 is not a time budget"),
    (["--budget", "nan"], "nan is not a time budget"),
    (["--budget", "inf"], "inf is not a time budget"),
    (["--budget", "-5"], "-5 is not a time budget"),
    (["--budget", "soon"], "'soon' is not a number of seconds"),
    (["--steps", ""], "--steps '' names no step"),
    (["--steps", " , "], "names no step"),
    (["--steps", "check,nope"], "unknown steps ['nope']"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_arguments_are_refused_before_any_step(tmp_path, capsys, no_steps, args, message):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        driver.main([str(out), "--dry-run", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_existing_file_as_out_is_refused_in_one_line(tmp_path, capsys, no_steps):
    target = tmp_path / "taken"
    target.write_text("mine")
    for out, says in ((target, "OUT is an existing file"), (target / "sub", "a folder above OUT, is an existing file")):
        with pytest.raises(SystemExit) as exit_:
            driver.main([str(out), "--dry-run"])
        assert exit_.value.code == 2 and says in capsys.readouterr().err
    assert target.read_text() == "mine"


def test_parse_only_says_what_would_run_and_makes_nothing(tmp_path, capsys, no_steps):
    out = tmp_path / "out"
    assert driver.main([str(out), "--steps", "env, check,", "--budget", "120", "--parse-only"]) == 0
    assert f"GPU: steps env, check into {out}, 120 s budget" in capsys.readouterr().out
    assert driver.main([str(out), "--dry-run", "--parse-only"]) == 0
    assert "dry run (CPU): steps env, check, smoke, gpt2, speed, report" in capsys.readouterr().out
    assert not out.exists()


def test_the_script_checks_its_arguments_first(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    env = {**os.environ, "PYTHON": sys.executable}
    taken = tmp_path / "taken"
    taken.write_text("")
    for args, message in [*BAD[:4], ([str(taken), "--dry-run"], "OUT is an existing file")]:
        argv = args if args[0] == str(taken) else [str(tmp_path / "out"), "--dry-run", *args]
        proc = subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2, (args, proc.stdout[-2000:], proc.stderr[-2000:])
        assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_scripts_torch_floor_is_pyprojects():
    found = re.search(r'"torch>=([0-9.]+)', (REPO / "pyproject.toml").read_text())
    assert found is not None
    floor = found.group(1)
    stated = re.findall(r"torch>=([0-9.]+)", SCRIPT.read_text())
    assert stated and set(stated) == {floor}, stated
