"""The package layout keeps its promises: one import name, built-ins on the public API
only, small modules and functions, and every package installed (import cycles:
tests/test_import_cycles.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnbench
from tests.helpers import REPO, python

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOTS = {"attnbench": REPO / "harness", "attnbench.plugins": REPO / "plugins", "attnbench.suites": REPO / "suites"}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60  # in experiments/, run/ and plan/


def _modules() -> dict[str, Path]:
    out = {}
    for name, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def _imports(path: Path, module: str) -> list[tuple[str, list[str], int]]:
    """(absolute module, imported names, line) for every import outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def test_import_name_is_attnbench_and_no_generic_names_are_installed(tmp_path):
    proc = python(
        """
        import importlib.util, attnbench, attnbench.plugins.attention.softmax
        print(importlib.util.find_spec("harness"), importlib.util.find_spec("plugins"))
    """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", "None"]


def test_python_dash_m_attnbench_is_the_cli(tmp_path):
    proc = python(
        "import runpy, sys; sys.argv = ['attnbench', '--help']; runpy.run_module('attnbench', run_name='__main__')",
        cwd=tmp_path,
    )
    assert "usage: attnbench" in proc.stdout


def test_builtin_plugins_import_only_the_public_api():
    public = set(attnbench.__all__)
    bad = []
    for module, path in _modules().items():
        if not module.startswith("attnbench.plugins"):
            continue
        for target, names, line in _imports(path, module):
            where = f"{path.relative_to(REPO)}:{line}"
            if target == "attnbench":
                bad += [f"{where}: attnbench.{n} is not in attnbench.__all__" for n in names if n not in public]
            elif target.startswith("attnbench.") and not target.startswith("attnbench.plugins"):
                bad.append(f"{where}: imports private module {target}")
    assert not bad, "\n".join(bad)


def test_modules_and_functions_stay_small():
    long_modules, long_functions = [], []
    for module, path in _modules().items():
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(REPO)} ({len(lines)} lines)")
        if not module.startswith(("attnbench.experiments", "attnbench.run", "attnbench.plan")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({n} lines)")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_pyproject_lists_every_package():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = sorted(m for m, p in _modules().items() if p.name == "__init__.py")
    assert sorted(config["packages"]) == on_disk
    assert config["package-dir"] == {
        "attnbench": "harness",
        "attnbench.plugins": "plugins",
        "attnbench.suites": "suites",
    }


def test_a_family_is_its_registration_and_its_model_or_data_module():
    """No options module beside them, and a registration (an entry point) imports neither its
    model nor its data, not even inside a function: it names them by a "module:object" string."""
    assert not sorted(p.relative_to(REPO) for p in (REPO / "plugins").rglob("*_options.py"))
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    modules = _modules()
    bad = []
    for target in config["entry-points"]["attnbench"].values():
        if not target.startswith("attnbench.plugins."):
            continue
        path = modules[target]
        for imported, names, line in _imports(path, target):
            heavy = [m for m in (imported, *(f"{imported}.{n}" for n in names)) if m.endswith(("_model", "_data"))]
            bad += [f"{path.relative_to(REPO)}:{line} imports {m}" for m in heavy]
    assert not bad, "\n".join(bad)


def test_every_entry_point_resolves_to_an_installed_module():
    import importlib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for target in [*config["entry-points"]["attnbench"].values(), *config["scripts"].values()]:
        importlib.import_module(target.partition(":")[0])
