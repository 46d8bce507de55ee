"""`--set KEY=VALUE` overrides of a suite, applied to the merged YAML before validation.

Keys are dotted paths into the suite (``defaults.train.lr``, ``device``); experiments are
addressed by name (``experiments.text.seeds``), a name with dots too (``experiments.v1.2.seeds``:
the longest experiment name the key spells). Values are YAML (``[0, 1]``, ``{steps: 50}``);
numbers YAML reads as strings (``1e-3``) are taken as numbers.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from typing import Any

import yaml

from attnbench.errors import SuiteError, quoted, shortened
from attnbench.plan import bounded_yaml


@dataclass(frozen=True)
class Override:
    text: str  # as given on the command line
    path: tuple[str, ...]
    value: Any


def _number(raw: str) -> Any:
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def parse_override(text: str) -> Override:
    key, sep, raw = text.partition("=")
    path = tuple(part.strip() for part in key.split("."))
    if not sep or not all(path):
        raise SuiteError(f"--set {quoted(text)}: write KEY=VALUE with a dotted key, e.g. --set defaults.train.lr=1e-3")
    try:
        _, value = bounded_yaml.load(raw)
    except bounded_yaml.LimitError as exc:
        raise SuiteError(f"--set {quoted(text)}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SuiteError(f"--set {quoted(text)}: the value is not valid YAML ({exc}); quote it or fix it") from None
    return Override(text, path, _number(value) if isinstance(value, str) else value)


def _experiment(raw: dict[str, Any], ov: Override) -> tuple[int, int]:
    """(index of the experiment ``ov`` addresses, how many parts of its path name it). A name may
    hold dots (``v1.2``): the longest name the parts after ``experiments`` spell, with at least
    one setting after it, is the one meant."""
    names = [e.get("name") for e in raw.get("experiments", []) if isinstance(e, dict)]
    rest = ov.path[1:]
    for n in range(len(rest) - 1, 0, -1):
        name = ".".join(rest[:n])
        if name in names:
            return names.index(name), n
    whole = ".".join(rest)
    named = [n for n in names if isinstance(n, str)]
    if whole in named:  # the experiment itself, with no setting after its name
        raise SuiteError(
            f"--set {quoted(ov.text)}: address a setting of experiment {quoted(whole)}, e.g. "
            f"experiments.{whole}.seeds=[0,1]"
        )
    tried = [".".join(rest[:n]) for n in range(1, len(rest))]  # the names the key may spell
    close = [c for t in reversed(tried) for c in difflib.get_close_matches(t, named, n=1)]
    hint = f"did you mean {close[0]!r}? " if close else ""
    if close and "." in close[0]:  # a dotted name is addressed like any other
        hint += f"(e.g. experiments.{close[0]}.{rest[-1]}=...) "
    raise SuiteError(
        f"--set {quoted(ov.text)}: the suite has no experiment named {' or '.join(map(quoted, tried))}; "
        f"{hint}experiments: {quoted(names)}"
    )


def target(raw: dict[str, Any], ov: Override) -> tuple[Any, ...]:
    """The override's location in the merged suite (experiment names made indices)."""
    if ov.path[0] == "experiments":
        if len(ov.path) < 3:
            raise SuiteError(
                f"--set {quoted(ov.text)}: address a setting of one experiment, e.g. experiments.NAME.seeds=[0,1]"
            )
        index, parts = _experiment(raw, ov)
        return ("experiments", index, *ov.path[1 + parts :])
    return ov.path


def _key(node: Any, part: Any, ov: Override, depth: int) -> Any:
    """``part`` as a key of ``node``: a list takes a whole-number index within its length."""
    if not isinstance(node, list) or isinstance(part, int):  # an int: the experiment index `target` found
        return part
    if part.isdigit() and int(part) < len(node):
        return int(part)
    where = ".".join(ov.path[:depth])
    if not node:
        raise SuiteError(
            f"--set {ov.text!r}: {where} is an empty list, so it has no item {part!r}; "
            f"set {where} itself instead, e.g. --set {where}=[...]"
        )
    raise SuiteError(
        f"--set {ov.text!r}: {where} is a list of {len(node)} item(s), so {part!r} is not an index "
        f"of it; give an index from 0 to {len(node) - 1} (e.g. {where}.0=...), or set {where} itself "
        f"(e.g. {where}=[...])"
    )


def apply_overrides(raw: dict[str, Any], overrides: list[Override]) -> dict[str, Any]:
    """A copy of ``raw`` with each override set, in order (missing mappings are created;
    list items are addressed by index, ``experiments.NAME.variants.0``)."""
    out = copy.deepcopy(raw)
    for ov in overrides:
        loc = target(out, ov)
        node: Any = out
        for i, part in enumerate(loc[:-1]):
            part = _key(node, part, ov, i)
            child = node[part] if isinstance(node, list) else node.get(part)
            if child is None:
                if str(loc[i + 1]).isdigit():
                    where = ".".join(ov.path[: i + 1])
                    raise SuiteError(
                        f"--set {ov.text!r}: {where} is not set, so it has no item {loc[i + 1]}; "
                        f"set {where} itself instead, e.g. --set {where}=[...]"
                    )
                child = node[part] = {}
            if not isinstance(child, (dict, list)):
                where = ".".join(map(str, ov.path[: i + 1]))
                raise SuiteError(
                    f"--set {quoted(ov.text)}: {shortened(where)} is {quoted(child)}, not a mapping; "
                    f"set {where} itself instead"
                )
            node = child
        node[_key(node, loc[-1], ov, len(loc) - 1)] = copy.deepcopy(ov.value)
    return out


def matching(overrides: list[Override], raw: dict[str, Any], loc: tuple[Any, ...]) -> Override | None:
    """The last override that set the value at error location ``loc`` (None if none did):
    directly, or through ``defaults`` (``defaults.model`` fills each of ``models``)."""
    for ov in reversed(overrides):
        try:
            at = target(raw, ov)
        except SuiteError:
            continue
        at = tuple(map(str, at))  # list indices are numbers in ``loc``, text in a key
        if tuple(map(str, loc[: len(at)])) == at:
            return ov
        if at[0] == "defaults" and len(loc) > 2 and loc[0] == "experiments":
            rest = tuple(map(str, loc[2:]))
            if rest and rest[0] == "models":
                rest = ("model", *rest[2:])
            if rest[: len(at) - 1] == at[1:]:
                return ov
    return None


def force_defaults(raw: dict[str, Any], overrides: list[Override]) -> dict[str, Any]:
    """After ``defaults`` are merged in: a ``defaults.*`` override also replaces the value an
    experiment sets itself (a command-line setting wins over the file), wherever that
    experiment has the section (``train`` of a speed experiment is left absent)."""
    out = copy.deepcopy(raw)
    for ov in overrides:
        if ov.path[0] != "defaults" or len(ov.path) < 2:
            continue
        section, rest = ov.path[1], ov.path[2:]
        for exp in out.get("experiments", []):
            if not isinstance(exp, dict):
                continue
            if section == "model" and isinstance(exp.get("models"), list):
                targets = [m for m in exp["models"] if isinstance(m, dict)]
            elif not rest:
                exp[section] = copy.deepcopy(ov.value)
                continue
            else:
                targets = [exp[section]] if isinstance(exp.get(section), dict) else []
            for node in targets:
                for part in rest[:-1]:
                    node = node.setdefault(part, {})
                    if not isinstance(node, dict):
                        break
                else:
                    node[rest[-1]] = copy.deepcopy(ov.value)
    return out


class CommandLine:
    """Stands in for a suite file in error messages about an override."""

    def __init__(self, ov: Override) -> None:
        self.path = f"--set {shortened(ov.text)}"
