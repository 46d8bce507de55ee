"""Running a mixer on a float64 input, with the rule named when it cannot: mixers must
accept float64 (the float64_at_scale check compares against it). A failure points at the
user's line: the first cast that turned a float64 tensor into a lower precision, else the
innermost frame of the traceback in a plugin's code (not torch's, attnbench's core or the
standard library's)."""

from __future__ import annotations

import functools
import importlib.util
import sysconfig
import traceback
from pathlib import Path

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from attnbench.gate.common import ContractError, mixer_y


@functools.cache
def _not_user() -> tuple[tuple[str, ...], str, str]:
    """(torch's and attnbench's folders, the built-in plugins' folder, the stdlib's folder)."""

    def folder(name: str) -> str:  # found, not imported
        spec = importlib.util.find_spec(name)
        return str(Path(spec.origin).resolve().parent) if spec and spec.origin else "\0"

    stdlib = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
    return (folder("torch"), folder("attnbench")), folder("attnbench.plugins"), stdlib


def _is_user(filename: str) -> bool:
    """Code of a plugin (built-in or not), not torch's, attnbench's core or the stdlib's."""
    ours, plugins, stdlib = _not_user()
    path = str(Path(filename).resolve())
    if path.startswith(plugins):  # installed, the built-in plugins sit inside attnbench's folder
        return True
    if path.startswith(ours):
        return False
    # Without a virtual environment site-packages sits inside the stdlib's folder.
    return not path.startswith(stdlib) or "site-packages" in path or "dist-packages" in path


def _where(frame: traceback.FrameSummary) -> str:
    return f"{Path(frame.filename).name}:{frame.lineno}"


def user_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost frame in a plugin's code, if any."""
    for frame in reversed(frames):
        if _is_user(frame.filename):
            return frame
    return None


class _Downcasts(TorchFunctionMode):
    """Notes the first op that makes a lower-precision float tensor from a float64 one."""

    def __init__(self) -> None:
        super().__init__()
        self.first: str | None = None  # ".float() cast at file.py:12"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (
            self.first is None
            and isinstance(out, torch.Tensor)
            and out.is_floating_point()
            and out.dtype != torch.float64
            and any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args)
        ):
            frame = user_frame(traceback.extract_stack()[:-1])
            if frame is not None:
                self.first = f"a .{getattr(func, '__name__', 'cast')}() cast at {_where(frame)}"
        return out


def float64_output(mixer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``mixer(x)`` for a float64 ``x`` (B, T, D), which must come back float64; anything else
    raises ContractError naming the rule and, where it can, the line to look at."""
    casts, frame = _Downcasts(), None
    try:
        with casts:
            y = mixer_y(mixer(x))  # (B, T, D)
    except Exception as exc:
        frame = None if isinstance(exc, ContractError) else user_frame(traceback.extract_tb(exc.__traceback__))
        message = " ".join(str(exc).split())
        message = message if len(message) <= 300 else message[:297] + "..."
        kind = "" if isinstance(exc, ContractError) else f"{type(exc).__name__}: "  # ours: the message says it
        got = f"{kind}{message}" + (f" (at {_where(frame)})" if frame else "")
    else:
        if y.dtype == torch.float64:
            return y
        got = f"the mixer returned {y.dtype}"
    guess = casts.first or (f"a float32 tensor or cast at {_where(frame)}" if frame else "")
    raise ContractError(
        "mixers must accept float64" + (f" ({guess}?)" if guess else "") + f": with a float64 input, {got}"
    )
