"""benchmarks/README.md lists every kept benchmark (issue 58): each script in benchmarks/ has a row
in its table, the README names no script that is gone, each row's command runs that script,
and every script answers ``--help`` (its imports resolve and its arguments parse)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers import REPO

BENCH = REPO / "benchmarks"
README = BENCH / "README.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")  # a table row: its first cell names the script
MENTION = re.compile(r"benchmarks/([\w/.-]+?\.py)\b")  # any path into benchmarks/ in the text


def on_disk() -> set[str]:
    """Scripts (``name.py``) and runnable packages (``name/``, with a __main__.py) in benchmarks/."""
    files = {p.name for p in BENCH.glob("*.py") if p.name != "__init__.py"}
    packages = {f"{p.name}/" for p in BENCH.iterdir() if (p / "__main__.py").is_file()}
    return files | packages


def rows() -> dict[str, str]:
    """The README table's rows: script name -> the whole row."""
    out: dict[str, str] = {}
    for line in README.read_text().splitlines():
        m = ROW.match(line)
        if m and m.group(1) != "script":
            out[m.group(1)] = line
    return out


def test_every_script_is_listed_and_every_listed_script_exists() -> None:
    listed, present = set(rows()), on_disk()
    assert present, "benchmarks/ holds no script: the glob is wrong"
    assert not present - listed, f"not in benchmarks/README.md's table: {sorted(present - listed)}; add a row"
    assert not listed - present, f"benchmarks/README.md lists scripts that do not exist: {sorted(listed - present)}"


def test_the_readme_mentions_no_removed_script() -> None:
    mentioned = set(MENTION.findall(README.read_text()))
    gone = {m for m in mentioned if not (BENCH / m).is_file()}
    assert not gone, f"benchmarks/README.md names missing files {sorted(gone)}: cite the commit instead"


def test_each_rows_command_runs_its_own_script() -> None:
    for name, row in rows().items():
        runs = f"python -m benchmarks.{name.rstrip('/')}" if name.endswith("/") else f"python benchmarks/{name}"
        alt = "scripts/gpu_check.sh" if name == "gpu_check/" else runs
        assert runs in row or alt in row, f"the row for {name} gives no command that runs it ({runs!r}): {row}"


HELP = """
import runpy, sys
for target in sys.argv[1:]:
    print("@@", target, flush=True)
    sys.argv = [target, "--help"]
    try:
        if target.endswith(".py"):
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        print("@@exit", e.code, flush=True)
    except BaseException as e:
        print("@@error", type(e).__name__, e, flush=True)
"""


def test_every_script_answers_help() -> None:
    """One process for all (torch imports once): each script's imports resolve and --help exits 0."""
    targets = [f"benchmarks/{n}" if n.endswith(".py") else f"benchmarks.{n.rstrip('/')}" for n in sorted(on_disk())]
    proc = subprocess.run([sys.executable, "-c", HELP, *targets], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sections = proc.stdout.split("@@ ")[1:]
    assert len(sections) == len(targets), proc.stdout[-3000:]
    for target, section in zip(targets, sections, strict=True):
        assert section.startswith(target), section[:200]
        assert "usage:" in section and "@@exit 0" in section, f"{target} --help failed:\n{section[-2000:]}"
