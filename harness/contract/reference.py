"""Callables named by a ``"package.module:object"`` string and imported on first use, as
lm-eval registers its models: a registration names its torch model without importing torch.

``Reference`` is the descriptor a contract dataclass declares such a field with: it takes
a callable (kept as given) or a string (kept as a ``LazyObject``), and always reads back as
something to call.
"""

from __future__ import annotations

import difflib
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from attnbench.errors import PluginReferenceError

FORMAT = "package.module:object"
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET_RE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")

T = TypeVar("T")


@dataclass(frozen=True)
class LazyObject:
    """The callable ``target`` ("package.module:object") names, imported on its first call.

    owner: who declared it, for messages ("variant 'linear' (plugin 'linear'): build_mixer").
    """

    target: str
    owner: str = field(default="", compare=False)

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    def format_problem(self) -> str | None:
        """Why ``target`` is not a ``package.module:object`` string, or None when it is one."""
        if _TARGET_RE.match(self.target):
            return None
        return f"{self.target!r} is not a {FORMAT!r} string"

    def resolve(self) -> Any:
        """The named object, imported once; PluginReferenceError when it cannot be found."""
        found = self.__dict__.get("_resolved")
        if found is None:
            found = self._import()
            object.__setattr__(self, "_resolved", found)  # a cache, not a field: frozen all the same
        return found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # pickles by name; the child imports it again
        return (LazyObject, (self.target, self.owner))

    def _import(self) -> Any:
        problem = self.format_problem()
        if problem:
            raise PluginReferenceError(f"{self._who()}{problem}")
        module_name, _, path = self.target.partition(":")
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if module_name != missing and not module_name.startswith(missing + "."):
                raise  # the module exists and imports something missing: its own error, as raised
            raise PluginReferenceError(
                f"{self._who()}{self.target!r}: no module named {module_name!r}; install the package that "
                "provides it or correct the module part of the string"
            ) from exc
        for depth, name in enumerate(path.split(".")):
            if not hasattr(obj, name):
                where = ".".join([module_name, *path.split(".")[:depth]])
                close = difflib.get_close_matches(name, [n for n in dir(obj) if not n.startswith("_")], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise PluginReferenceError(
                    f"{self._who()}{self.target!r}: {where} has no attribute {name!r}{hint}; "
                    "correct the object part of the string"
                )
            obj = getattr(obj, name)
        if not callable(obj):
            raise PluginReferenceError(
                f"{self._who()}{self.target!r} names a {type(obj).__name__}, not something callable; "
                "name the class or function to call"
            )
        return obj

    def _who(self) -> str:
        return f"{self.owner}: " if self.owner else ""


class Reference(Generic[T]):
    """A dataclass field holding a callable of type ``T`` given as itself or as a
    ``"package.module:object"`` string (stored as a ``LazyObject``; the registry checks its
    format and names its owner). Reads back as the callable, or the default."""

    _NO_DEFAULT: Any = object()

    def __init__(self, default: Any = _NO_DEFAULT) -> None:
        self.default = default
        self.slot = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_value"

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> T: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> T:
        if obj is None:  # the class asks: the dataclass reads this as the field's default
            if self.default is self._NO_DEFAULT:
                raise AttributeError(self.slot)
            return self.default
        return getattr(obj, self.slot)

    def __set__(self, obj: object, value: T | str) -> None:
        object.__setattr__(obj, self.slot, LazyObject(value) if isinstance(value, str) else value)
