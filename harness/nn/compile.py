"""Optional ``torch.compile`` of a model: opt-in (``compile: true``), never the default on
CPU, and always recorded with the figures it produced. A compile failure surfaces as an
error at the first call (the cell fails with it); nothing falls back to eager silently."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

BACKEND = "inductor"  # torch.compile's default backend


def maybe_compile(model: nn.Module, enabled: bool) -> tuple[Any, dict[str, Any]]:
    """(the callable to run, what was applied). The module itself stays uncompiled, so
    its state dict and evaluation are unaffected."""
    if not enabled:
        return model, {"compile": False}
    return torch.compile(model, backend=BACKEND), {
        "compile": True,
        "compile_backend": BACKEND,
        "compile_mode": "default",
    }
