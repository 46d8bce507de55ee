"""No import cycle among the modules of ``attnbench`` (harness/), ``attnbench.plugins``
(plugins/) and ``attnbench.suites`` (suites/), lazy imports included.

The graph is read from source with ``ast``, nothing is imported. Its rules:

- Every ``import`` / ``from ... import`` in a file is an edge, wherever it stands: at the top,
  inside a function (a lazy import), under ``if TYPE_CHECKING:``. A cycle a function hides from
  import time is still two modules that each need the other.
- Relative imports are resolved; ``from pkg import name`` is an edge to ``pkg.name`` when that
  is a module, else to ``pkg``. ``import a.b`` is an edge to ``a.b`` only: the parent packages'
  ``__init__`` run first, but a package is not a dependency of its own submodules.
- A lazy facade is a package ``__init__`` that re-exports names on first use
  (``__getattr__ = lazy_getattr(__name__, HOMES, globals())``; ``attnbench`` and
  ``attnbench.kernels``). ``from attnbench import Variant`` (how a plugin must import: only
  ``attnbench.__all__``) is an edge to the module that defines ``Variant``
  (``attnbench.contract.variant``), not to the facade; a name the facade defines itself
  (``__version__``) is an edge to the facade. The facade's own imports of the names it
  re-exports (its ``TYPE_CHECKING`` block for type checkers) are the re-export, not a
  dependency of the facade, and are no edges.
- ``importlib.import_module(variable)`` (plugin loading, trackers by name) is not an edge:
  its target is data, not code.

Check it by hand: ``python -m pytest -n0 -q tests/test_import_cycles.py``.
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.helpers import REPO

ROOTS = {"attnbench": REPO / "harness", "attnbench.plugins": REPO / "plugins", "attnbench.suites": REPO / "suites"}

Graph = dict[str, dict[str, list[str]]]  # module -> imported module -> ["file:line", ...]


def modules_under(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file below each root folder."""
    out = {}
    for name, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def _facade_homes(tree: ast.Module) -> dict[str, str] | None:
    """A lazy facade's map (re-exported name -> home module), or None for any other module.
    The map is the dict assigned at module level to the name passed to ``lazy_getattr``."""
    map_name = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy_getattr" and len(node.args) > 1:
            map_name = ast.unparse(node.args[1])
    if map_name is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if any(ast.unparse(t) == map_name for t in targets):
            return _homes_literal(value)
    raise AssertionError(f"lazy_getattr's map {map_name!r} is not assigned at module level")


def _homes_literal(node: ast.expr) -> dict[str, str]:
    """A homes map's value: a dict display of ``"name": "module"`` items and
    ``**dict.fromkeys((names, ...), "module")`` unpackings."""
    assert isinstance(node, ast.Dict), f"a homes map must be a dict display, got {ast.unparse(node)}"
    out: dict[str, str] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if key is not None:
            out[ast.literal_eval(key)] = ast.literal_eval(value)
            continue
        assert isinstance(value, ast.Call) and ast.unparse(value.func) == "dict.fromkeys", ast.unparse(value)
        names, home = (ast.literal_eval(arg) for arg in value.args)
        out.update(dict.fromkeys(names, home))
    return out


def _imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[str, str | None, int]]:
    """(absolute module, imported name or None, line) for every import statement in the file."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            yield from ((base, alias.name, node.lineno) for alias in node.names)


def import_graph(roots: Mapping[str, Path]) -> Graph:
    """Every module's imports of other modules under ``roots``, by the rules above."""
    modules = modules_under(roots)
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in modules.items()}
    facades = {m: homes for m, tree in trees.items() if (homes := _facade_homes(tree)) is not None}

    def target(base: str, name: str | None) -> str | None:
        if name is not None and f"{base}.{name}" in modules:
            return f"{base}.{name}"
        if name is not None and name in facades.get(base, {}):
            return target(facades[base][name], name)  # a home may itself be a facade
        while base and base not in modules:  # `import a.b.c` where only a.b is ours
            base = base.rpartition(".")[0]
        return base or None

    graph: Graph = {m: defaultdict(list) for m in modules}
    for module, tree in trees.items():
        path = modules[module]
        for base, name, line in _imports(tree, module, path.name == "__init__.py"):
            if name is not None and facades.get(module, {}).get(name) == base:
                continue  # the facade's own mirror of a name it re-exports
            dest = target(base, name)
            if dest is not None:
                graph[module][dest].append(f"{_shown(path)}:{line}")
    return graph


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module, and modules importing
    themselves (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, {}):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: Graph, component: list[str]) -> str:
    """A cycle and the import lines that close it."""
    inside = set(component)
    lines = [f"cycle among {len(component)} module(s): {', '.join(component)}"]
    for module in component:
        for dest, where in sorted(graph[module].items()):
            if dest in inside:
                lines.append(f"  {module} -> {dest}  ({', '.join(dict.fromkeys(where))})")
    return "\n".join(lines)


def test_no_import_cycles_among_the_package_modules():
    graph = import_graph(ROOTS)
    assert len(graph) > 100 and "attnbench.plugins" in graph  # the roots were found
    found = cycles(graph)
    assert not found, "\n\n".join(describe(graph, c) for c in found)


def test_the_facades_maps_are_read_as_they_load():
    """The graph reads each lazy facade's map from source; it must be the map the package uses."""
    import attnbench
    import attnbench.kernels

    for package, homes in (("__init__.py", attnbench._HOMES), ("kernels/__init__.py", attnbench.kernels.HOMES)):
        assert _facade_homes(ast.parse((REPO / "harness" / package).read_text())) == homes


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return {"pkg": tmp_path / "pkg"}


FACADE = """
    from typing import TYPE_CHECKING
    from pkg.lazy import lazy_getattr
    __version__ = "1"
    if TYPE_CHECKING:
        from pkg.core.model import Model
    HOMES: dict[str, str] = {**dict.fromkeys(("Model",), "pkg.core.model")}
    __getattr__ = lazy_getattr(__name__, HOMES, globals())
"""


def test_a_lazy_import_inside_a_function_closes_a_cycle(tmp_path):
    roots = _package(
        tmp_path,
        {
            "__init__.py": "",
            "reg.py": "def build():\n    from pkg.model import Model\n",
            "model.py": "from pkg.reg import _options\n",
        },
    )
    assert cycles(import_graph(roots)) == [["pkg.model", "pkg.reg"]]


def test_type_checking_and_relative_imports_close_cycles(tmp_path):
    roots = _package(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..b import B\n",
            "b.py": "from pkg.sub import a\n",
            "c.py": "import pkg.c\n",
        },
    )
    assert cycles(import_graph(roots)) == [["pkg.b", "pkg.sub.a"], ["pkg.c"]]


def test_names_from_a_lazy_facade_lead_to_their_home_module(tmp_path):
    files = {"__init__.py": FACADE, "lazy.py": "", "core/__init__.py": "", "core/model.py": "", "plugin.py": ""}
    files["plugin.py"] = "from pkg import Model, __version__\n"
    graph = import_graph(_package(tmp_path, files))
    assert set(graph["pkg.plugin"]) == {"pkg.core.model", "pkg"}
    assert set(graph["pkg"]) == {"pkg.lazy"}  # its TYPE_CHECKING mirror of Model is the re-export
    assert cycles(graph) == []

    (tmp_path / "pkg/core/model.py").write_text("from pkg import __version__\n")  # the facade's own name
    (tmp_path / "pkg/lazy.py").write_text("from pkg import Model\n")
    assert cycles(import_graph({"pkg": tmp_path / "pkg"})) == [["pkg", "pkg.core.model", "pkg.lazy"]]
