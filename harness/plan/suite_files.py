"""Reading a suite's YAML files: each file parsed with its node tree (for line numbers),
duplicate keys refused, includes merged in order (plan/suite.py validates the result)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from attnbench.errors import SuiteError, quoted, shortened
from attnbench.plan import bounded_yaml
from attnbench.plan.shipped import exists


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: mappings key by key, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Source:
    """A parsed YAML file: its data and node tree (for line numbers)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SuiteError(f"{path}: cannot read suite file: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise SuiteError(
                f"{path}: a suite file is UTF-8 YAML text, but byte {exc.start} is not UTF-8; "
                "pass the suite's .yaml file"
            ) from None
        if not text.strip():
            raise SuiteError(
                f"{path}:1: the suite file is empty; a suite needs at least `version: 1` "
                "and `experiments:` (see suites/smoke.yaml)"
            )
        try:
            self.node, self.data = bounded_yaml.load(text)
        except bounded_yaml.LimitError as exc:
            raise SuiteError(f"{path}:{exc.line}: {exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise SuiteError(f"{where}: YAML syntax error: {problem}. Fix the YAML at that line.") from exc
        _no_duplicate_keys(path, self.node)
        if self.data is None:
            self.data = {}
        if not isinstance(self.data, dict):
            raise SuiteError(f"{path}:1: a suite must be a mapping of keys (version, name, experiments)")

    def find(self, loc: tuple[Any, ...]) -> tuple[int | None, bool]:
        """(1-based line of the deepest node along ``loc``, whether all of ``loc`` exists)."""
        node, line = self.node, None
        for part in loc:
            line = node.start_mark.line + 1
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if k.value == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                node = None
            if node is None:
                return line, False
        return (node.start_mark.line + 1 if node is not None else line), True

    def line(self, loc: tuple[Any, ...]) -> int | None:
        return self.find(loc)[0]


def _no_duplicate_keys(path: Path, node: Any) -> None:
    """YAML lets a later key silently replace an earlier one; a suite refuses it."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if key.value in seen:
                    raise SuiteError(
                        f"{path}:{line}: key {quoted(key.value)} appears twice in one mapping (first at "
                        f"line {seen[key.value]}); the later one would silently win. Keep one."
                    )
                seen[key.value] = line
            _no_duplicate_keys(path, value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_duplicate_keys(path, item)


def load_tree(path: Path, seen: tuple[Path, ...]) -> tuple[dict[str, Any], list[tuple[Source, int]], list[Source]]:
    """Merged raw mapping, the origin (file, index) of each experiment, and all sources."""
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise SuiteError(f"{path}: include cycle: {chain}; remove one of the includes")
    src = Source(path)
    includes = src.data.get("include", [])
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise SuiteError(f"{path}:{src.line(('include',))}: 'include' must be a list of file paths")
    merged: dict[str, Any] = {}
    origins: list[tuple[Source, int]] = []
    sources: list[Source] = []
    for inc in includes:
        inc_path = path.parent / inc
        if not exists(inc_path):
            raise SuiteError(
                f"{path}:{src.line(('include',))}: included file {quoted(inc)} not found "
                f"(looked at {shortened(str(inc_path))}); paths are relative to the including file"
            )
        data, inc_origins, inc_sources = load_tree(inc_path, (*seen, path))
        exps = merged.get("experiments", []) + data.pop("experiments", [])
        origins += inc_origins
        merged = deep_merge(merged, data)
        merged["experiments"] = exps
        sources += inc_sources
    own = {k: v for k, v in src.data.items() if k != "include"}
    own_exps = own.pop("experiments", []) or []
    if not isinstance(own_exps, list):
        raise SuiteError(f"{path}:{src.line(('experiments',))}: 'experiments' must be a list")
    exps = merged.get("experiments", [])
    for i, exp in enumerate(own_exps):
        name = exp.get("name") if isinstance(exp, dict) else None
        replaced = [j for j, e in enumerate(exps) if isinstance(e, dict) and name and e.get("name") == name]
        if replaced:  # same name as an included experiment: this file's version wins
            exps[replaced[0]], origins[replaced[0]] = exp, (src, i)
        else:
            exps.append(exp)
            origins.append((src, i))
    merged = deep_merge(merged, own)
    merged["experiments"] = exps
    return merged, origins, [src, *sources]
