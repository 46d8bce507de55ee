"""Which option of a plugin's options (a variant's ``variant_options``, a task's
``task_options``) has the wrong type for the dataclass's annotations: when ``__post_init__``
trips on one with a TypeError ("'<' not supported ...", "must be real number, not str"), the
message names the option instead."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from attnbench.errors import quoted

_SIMPLE: dict[Any, str] = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the annotated type (an annotation this does not know: yes)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in get_args(hint))
    if origin is Literal:
        return value in get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True


def _describe(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in get_args(hint))
    if get_origin(hint) is Literal:
        return f"one of {list(get_args(hint))}"
    if hint is type(None):
        return "null"
    return _SIMPLE.get(hint, getattr(hint, "__name__", str(hint)))


def type_problem(options: type, raw: dict[str, Any]) -> str | None:
    """ "x must be a number, got 'abc'" for the first option of a wrong type; None when all fit."""
    try:
        hints = typing.get_type_hints(options)
    except (NameError, TypeError):  # annotations this module cannot resolve: leave them to the dataclass
        return None
    for key, value in raw.items():
        hint = hints.get(key, Any)
        if not _fits(value, hint):
            return f"{key} must be {_describe(hint)}, got {quoted(value)}"
    return None
