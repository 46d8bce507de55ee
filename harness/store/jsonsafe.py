"""Strict JSON for the store: SQLite's JSON functions reject NaN and infinities, so a
non-finite float is written as the string "NaN", "Infinity" or "-Infinity" (everywhere,
in every JSON column) and read back as the float."""

from __future__ import annotations

import json
import math
from typing import Any

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _restore(obj: Any) -> Any:
    if isinstance(obj, str) and obj in _NON_FINITE:
        return _NON_FINITE[obj]
    if isinstance(obj, dict):
        return {k: _restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_restore(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """JSON text every strict parser accepts (``allow_nan=False`` proves it)."""
    return json.dumps(_finite(json.loads(json.dumps(obj, default=str))), sort_keys=True, allow_nan=False)


def loads(text: str) -> Any:
    return _restore(json.loads(text))


def loads_object(text: Any) -> dict[str, Any] | None:
    """A JSON column that holds an object: {} for SQL NULL; None where the text is damaged
    (not JSON, or JSON that is not an object: a truncated write, a hand edit)."""
    if text is None:
        return {}
    try:
        value = _restore(json.loads(text)) if isinstance(text, (str, bytes)) else None
    except (ValueError, RecursionError):  # json.JSONDecodeError is a ValueError
        return None
    return value if isinstance(value, dict) else None


def decoded(row: dict[str, Any], columns: tuple[str, ...]) -> dict[str, Any] | None:
    """``row`` with each of ``columns`` decoded (``loads_object``); None where one is damaged:
    readers skip such a row rather than fail on it (the report lists it under Problems)."""
    out = dict(row)
    for col in columns:
        value = loads_object(out.get(col))
        if value is None:
            return None
        out[col] = value
    return out
