"""Refusals that reproduce (issue 65): the ``attnbench check`` command that re-runs a verdict with
the settings it was reached at (lengths, options, precision, device, store), and what each stored
verdict of a variant's current code covers, for ``attnbench list``.

    check_command(variant, torch.device("cpu"), options, lengths=(64, 2048), autocast=(), store=path)
    # -> "attnbench check band_leak --lengths 64 2048 --store results/attnbench.sqlite"
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sqlite3
from pathlib import Path
from typing import Any

import torch

from attnbench import __version__
from attnbench.contract.variant import Variant
from attnbench.gate.checks import GATE_CODE
from attnbench.registry.identity import code_hash, variant_identity
from attnbench.store.provenance import content_key, device_name


def option_changes(variant: Variant, options: Any) -> dict[str, Any]:
    """The options that differ from the variant's defaults, as JSON-ready values."""
    if options is None or not dataclasses.is_dataclass(options) or isinstance(options, type):
        return {}
    default = variant.make_options(None)
    changed = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if value != getattr(default, f.name, None):
            changed[f.name] = list(value) if isinstance(value, tuple) else value
    return changed


def check_command(
    variant: Variant,
    device: torch.device,
    options: Any = None,
    *,
    lengths: tuple[int, ...] = (),
    autocast: tuple[str, ...] | None = None,
    store: str | Path | None = None,
) -> str:
    """The ``attnbench check`` command that reaches the same verdict (its cache key included)."""
    words = ["attnbench", "check", variant.name]
    if lengths:
        words += ["--lengths", *map(str, lengths)]
    for name, value in option_changes(variant, options).items():
        words += ["--option", f"{name}={json.dumps(value)}"]
    if device.type == "cpu" and autocast and "bf16" in autocast:
        words += ["--precision", "bf16"]
    if device.type != "cpu":
        words += ["--device", str(device)]
    if store is not None:
        words += ["--store", str(store)]
    return shlex.join(words)


def code_key(variant: Variant, device: torch.device) -> str:
    """The variant's code, the gate's code and the device: the part of a verdict's key that
    settings (lengths, options, precision) do not change."""
    dev = device_name(device) if device.type != "cuda" or torch.cuda.is_available() else str(device)
    inputs = {**variant_identity(variant), "device": dev, "torch": torch.__version__, "harness": __version__}
    return content_key({**inputs, "gate_code": code_hash(*GATE_CODE)})


def coverage(store_path: str | Path, variant: Variant, device: torch.device) -> list[tuple[str, list[str], str]]:
    """(status, failed checks, what it covers) for each stored verdict of the variant's current
    code: 'fixed lengths' or 'fixed lengths + T 64/2048', with non-default options and bf16."""
    try:  # read-only: listing never writes
        db = sqlite3.connect(f"file:{Path(store_path).resolve()}?mode=ro", uri=True)
        rows = db.execute(
            "SELECT gate_key, check_name, status, provenance FROM checks WHERE variant = ?", (variant.name,)
        ).fetchall()
        db.close()
    except sqlite3.Error:
        return []
    wanted, found = code_key(variant, device), {}
    for gate_key, check, status, prov in rows:
        meta = json.loads(prov or "{}").get("gate_settings") or {}
        if meta.get("code_key") != wanted:
            continue
        entry = found.setdefault(gate_key, (meta, []))
        if status in ("fail", "error"):
            entry[1].append(check)
    out = []
    for meta, failed in found.values():
        covers = "fixed lengths" + (f" + T {'/'.join(map(str, meta['lengths']))}" if meta.get("lengths") else "")
        covers += "".join(f", {k}={json.dumps(v)}" for k, v in (meta.get("options") or {}).items())
        covers += ", bf16" if "bf16" in (meta.get("autocast") or []) else ""
        out.append(("FAIL" if failed else "pass", sorted(failed), covers))
    return sorted(out, key=lambda item: (item[2] != "fixed lengths", item[2]))
