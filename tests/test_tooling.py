"""Static tools follow the code: Pyright resolves every import (``attnbench`` lives in
``harness/``, reached through the strict editable install) and reports no type error, and
ruff finds nothing to fix or reformat.
The configurations are pyproject.toml's ``[tool.pyright]`` and ``[tool.ruff]``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

INSTALL = 'pip install -e ".[test]" -c constraints.txt --config-settings editable_mode=strict'
CHECKED = ("harness", "plugins", "suites", "tests", "benchmarks")  # [tool.pyright] include


def _tool(name: str) -> str:
    """The executable ``name`` beside this interpreter (the test extra installs it), else on PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        message = f"{name} is not installed; it comes with the test extra: {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(message + " (required when CI is set)")
        pytest.skip(message)
    return found


def _checked_files() -> list[Path]:
    """The Python files of the checked folders, the editable install's build tree left out."""
    files = [path for root in CHECKED for path in (REPO / root).rglob("*.py")]
    return [path for path in files if "build" not in path.relative_to(REPO).parts]


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=timeout)


@pytest.mark.slow
def test_pyright_resolves_every_import_and_finds_no_type_error():
    # CI's type check: it runs here (beside the other tests) rather than as a step of its own.
    # The interpreter running the tests is the environment checked: its install must be one Pyright follows.
    proc = _run(_tool("pyright"), "--outputjson", "--pythonpath", sys.executable, timeout=600)
    assert proc.stdout.lstrip().startswith("{"), f"pyright did not run (exit {proc.returncode}): {proc.stderr}"
    report = json.loads(proc.stdout)
    checked = len(_checked_files())
    assert report["summary"]["filesAnalyzed"] >= checked, report["summary"]  # not vacuously clean
    unresolved = [
        f"{Path(d['file']).relative_to(REPO)}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d.get("rule") == "reportMissingImports"
        or (d.get("rule") == "reportAttributeAccessIssue" and "unknown import symbol" in d["message"])
    ]
    assert not unresolved, (
        f"{len(unresolved)} imports Pyright cannot resolve (is attnbench installed with {INSTALL}? "
        f"a new module needs a reinstall):\n" + "\n".join(unresolved[:50])
    )
    errors = [
        f"{Path(d['file']).relative_to(REPO)}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d.get("severity") == "error"
    ]
    assert not errors, f"pyright (basic mode, pyproject.toml): {len(errors)} errors:\n" + "\n".join(errors[:50])


def test_ruff_finds_nothing():
    proc = _run(_tool("ruff"), "check", ".", timeout=120)
    assert proc.returncode == 0, f"ruff check: {proc.stdout}{proc.stderr}\nfix: bash scripts/ruff_fix.sh, then by hand"


def test_ruff_format_changes_nothing():
    proc = _run(_tool("ruff"), "format", "--check", ".", timeout=120)
    assert proc.returncode == 0, f"ruff format --check: {proc.stdout}{proc.stderr}\nfix: bash scripts/ruff_fix.sh"


# Packages whose top-level __init__ Pyright binds slowly (transformers' names thousands of lazy
# attributes: about 45 s of the type check per run, against 2 s for a defining module).
SLOW_TO_TYPE_CHECK = ("transformers",)


def test_checked_code_imports_slow_packages_from_their_defining_modules():
    """`from transformers import X` or `import transformers` in checked code costs the type check
    (and CI) tens of seconds: import X from its module (transformers.modeling_utils, ...) or, where
    only the package's presence matters, by name with importlib."""
    import ast

    found = []
    for path in _checked_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n in SLOW_TO_TYPE_CHECK]
    assert not found, "import these from their defining modules:\n" + "\n".join(found)
