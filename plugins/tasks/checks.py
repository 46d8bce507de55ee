"""Checks of task options shared by the task plugins, free of torch."""

from __future__ import annotations

from typing import Any


def check_int(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError unless value is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_prob(name: str, value: Any) -> None:
    """Raise ValueError unless value is a number (not a bool) in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
