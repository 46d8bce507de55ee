"""What identifies code that ran: a variant's own modules, and the harness packages a
cell kind runs. Both are hashed by content, so a stale stored cell or cached gate
verdict can never survive an edit of code it depended on.

- A plugin's identity covers every module of its own package that its plugin module
  imports, transitively (found by reading import statements, so it does not depend on
  what happens to be imported already), and the shared kernels (``attnbench.kernels``)
  those modules use.
- Harness code is hashed per package, over the sorted content hashes of its files:
  moving a file inside the hashed set changes nothing, changing any line changes it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.metadata as md
import importlib.util
import inspect
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from attnbench.contract.reference import LazyObject

if TYPE_CHECKING:
    from attnbench.contract.variant import Variant

BUILTIN_PLUGINS = "attnbench.plugins"
SHARED_KERNELS = "attnbench.kernels"  # chunked scans offered to every plugin through attnbench.__all__


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _origin(name: str) -> Path | None:
    """The .py file of an importable module or package, or None (not found, not Python).
    A name defined in a module (``pkg.mod.Name`` from ``from pkg.mod import Name``) is None
    without running ``pkg.mod``, as ``find_spec`` would (a plugin's model module imports torch)."""
    parent = name.rpartition(".")[0]
    try:
        if parent:
            parent_spec = importlib.util.find_spec(parent)
            if parent_spec is None or parent_spec.submodule_search_locations is None:
                return None  # the parent is no package: name is an attribute of a module, or nothing
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def own_package(module_name: str) -> str:
    """The package whose modules count as a plugin's own: ``attnbench.plugins`` for the
    built-ins, the top-level package otherwise."""
    if module_name == BUILTIN_PLUGINS or module_name.startswith(BUILTIN_PLUGINS + "."):
        return BUILTIN_PLUGINS
    return module_name.split(".")[0]


# One import statement: (level, module, names); level is None for `import a, b` (names a, b).
_Import = tuple[int | None, str, tuple[str, ...]]


@functools.lru_cache(maxsize=1024)
def _import_statements(source: str) -> tuple[_Import, ...]:
    """The import statements of a module's source, parsed once per distinct text (a registry
    load asks for the same files many times; an edited file is a new text)."""
    out: list[_Import] = []
    for node in _statements(ast.parse(source).body):
        if isinstance(node, ast.Import):
            out.append((None, "", tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "", tuple(alias.name for alias in node.names)))
    return tuple(out)


def _statements(nodes: Iterable[ast.AST]) -> Iterable[ast.AST]:
    """Statements at any depth (imports are statements: no need to visit expressions)."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, field, None) or ())


def _imports_of(path: Path) -> tuple[_Import, ...]:
    return _import_statements(path.read_text(encoding="utf-8"))


def _imported_names(path: Path, module_name: str) -> Iterable[str]:
    """Absolute names a module's import statements may refer to (modules or packages)."""
    is_pkg = path.name == "__init__.py"
    package = module_name if is_pkg else module_name.rpartition(".")[0]
    for level, module, names in _imports_of(path):
        if level is None:
            yield from names
            continue
        base = module
        if level:
            parts = package.split(".")
            parts = parts[: len(parts) - (level - 1)]
            base = ".".join(parts + ([module] if module else []))
        yield base
        yield from (f"{base}.{name}" for name in names)


def _with_parents(name: str, root: str) -> list[str]:
    """``name`` and the packages between it and ``root`` (their __init__ runs too)."""
    out, parts = [], name.split(".")
    for i in range(len(root.split(".")), len(parts) + 1):
        out.append(".".join(parts[:i]))
    return out


def module_closure(module_names: Iterable[str], root: str) -> dict[str, Path]:
    """Every module under ``root`` that ``module_names`` import, transitively: name -> file."""
    found: dict[str, Path] = {}
    todo = [n for name in module_names for n in _with_parents(name, root)]
    while todo:
        name = todo.pop()
        if name in found or not (name == root or name.startswith(root + ".")):
            continue
        path = _origin(name)
        if path is None:
            continue
        found[name] = path
        for dep in _imported_names(path, name):
            if dep == root or dep.startswith(root + "."):
                todo.extend(_with_parents(dep, root))
    return dict(sorted(found.items()))


def _defining_modules(item: Any, plugin: Any) -> list[str]:
    """Modules that define a registered item: the plugin module and its callables' modules
    (a "package.module:object" string's module by name, without importing it)."""
    names = []
    callables = ("build_mixer", "build_model", "attention_maps", "generate", "evaluate", "guess_accuracy")
    for obj in (plugin, *(getattr(item, a, None) for a in (*callables, "options", "seq_len"))):
        if obj is None:
            continue
        if isinstance(obj, ModuleType):
            names.append(obj.__name__)
            continue
        if isinstance(obj, LazyObject):
            names.append(obj.module)
            continue
        target = inspect.unwrap(obj) if callable(obj) else obj
        mod = getattr(target, "__module__", None) or getattr(type(target), "__module__", None)
        if mod and mod not in ("builtins", "__main__"):
            names.append(mod)
    return list(dict.fromkeys(names))


def _shared_kernel_modules(path: Path) -> Iterable[str]:
    """Modules of ``attnbench.kernels`` a file uses, whether it imports them from there or
    takes the names ``attnbench.__all__`` re-exports (``from attnbench import log_attention``)."""
    for level, module, names in _imports_of(path):
        if level != 0:  # `import x` or a relative import
            continue
        if module == "attnbench":  # attnbench re-exports these names: their homes, without importing them
            homes: dict[str, str] = importlib.import_module(SHARED_KERNELS).HOMES
            yield from (homes[name] for name in names if name in homes)
        elif module.startswith(SHARED_KERNELS):
            yield module


def plugin_source_files(item: Any, plugin: Any) -> tuple[str, ...]:
    """Files of a registered variant or task's own package that define it, transitively,
    and the shared kernel modules (``attnbench.kernels``) those files use."""
    files: dict[str, Path] = {}
    for name in _defining_modules(item, plugin):
        files.update(module_closure([name], own_package(name)))
    kernels = [k for path in list(files.values()) for k in _shared_kernel_modules(path)]
    if kernels:
        files.update(module_closure(kernels, SHARED_KERNELS))
    return tuple(str(p) for _, p in sorted(files.items()))


def sources_digest(files: Iterable[str]) -> dict[str, str]:
    """file name relative to its package root -> sha256 ("missing" when gone)."""
    out = {}
    for f in files:
        p = Path(f)
        out[_display_name(p)] = file_sha256(p) if p.is_file() else "missing"
    return dict(sorted(out.items()))


def _display_name(path: Path) -> str:
    parts = path.parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else path.name


@functools.cache
def package_files(name: str) -> tuple[Path, ...]:
    """The .py files of a module, or of a package and every package below it."""
    path = _origin(name)
    if path is None:
        raise ValueError(f"no Python module or package named {name!r}")
    if path.name != "__init__.py":
        return (path,)
    return tuple(sorted(path.parent.rglob("*.py")))


def code_hash(*names: str) -> str:
    """Hash of harness code by content: modules and whole packages (recursively).

    Only file contents enter (sorted), so moving an unchanged file within the hashed
    packages keeps the hash, and any edit of any line changes it.
    """
    files = {p for name in names for p in package_files(name)}
    digests = sorted(file_sha256(p) for p in files)
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]


def _dist_version(dist: str) -> str:
    if dist in ("", "?", "(in-process)"):
        return ""
    try:
        return md.version(dist)
    except (md.PackageNotFoundError, ValueError):
        return ""


def variant_identity(variant: Variant) -> dict[str, Any]:
    """What identifies a variant's code version (part of cell and trust-gate keys); a
    hybrid's adds each of its parts' (and its sources are all of theirs)."""
    out = {
        "name": variant.name,
        "version": variant.version,
        "plugin": variant.plugin,
        "distribution": variant.distribution,
        "distribution_version": _dist_version(variant.distribution),
        "sources": sources_digest(variant.source_files),
    }
    parts = getattr(variant, "parts", ())
    if parts:
        out["parts"] = [{**variant_identity(p.variant), "options": p.changed()} for p in parts]
    return out
