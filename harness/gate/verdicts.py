"""The trust gate with its verdicts cached in the store under the variant's content key
(variant code + gate code + settings + device + library versions): the checks run once
per code version, and `attnbench run` refuses numbers from a variant that failed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch

from attnbench import __version__
from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.gate.checks import (
    CHECKS,
    DEFAULT_LONG_T,
    GATE_CODE,
    CheckResult,
    default_config,
    gate_autocast,
    gate_lengths,
    run_checks,
)
from attnbench.gate.reproduce import check_command, code_key, option_changes
from attnbench.registry.identity import code_hash, variant_identity
from attnbench.store.database import Store
from attnbench.store.provenance import content_key, device_name, provenance


@dataclass(frozen=True)
class Verdict:
    variant: str
    key: str
    results: list[CheckResult]
    cached: bool
    command: str = ""  # the `attnbench check` command that reaches this verdict (issue 65)

    @property
    def failed(self) -> list[str]:
        return [r.check for r in self.results if r.status in ("fail", "error")]


def _key_lengths(lengths: Iterable[int]) -> list[Any]:
    try:
        return list(gate_lengths(lengths))
    except (TypeError, ValueError):  # not lengths: run_checks reports the error; the key still differs
        return [repr(n) for n in lengths]


def gate_key_inputs(
    variant: Variant,
    device: str | torch.device,
    *,
    config: ModelConfig | None = None,
    long_T: int = DEFAULT_LONG_T,
    autocast: Iterable[str] | None = None,
    lengths: Iterable[int] = (),
) -> dict[str, Any]:
    """What identifies one verdict: the variant's code version, the gate's own code and
    settings (the experiment lengths probed among them: a longer experiment is checked anew),
    the device and library versions. Hash with ``provenance.content_key``.
    Source files are identified by content (sha256), not by path, so a moved checkout
    keeps its cached verdicts.
    """
    dev = torch.device(device)
    try:
        settings = (config or default_config(variant)).to_dict()
    except ValueError as exc:  # options that do not validate: run_checks reports the error
        settings = {"error": str(exc)}
    return {
        **variant_identity(variant),
        "device": device_name(dev) if dev.type != "cuda" or torch.cuda.is_available() else str(dev),
        "torch": torch.__version__,
        "harness": __version__,
        "gate_code": code_hash(*GATE_CODE),
        "settings": {
            "config": settings,
            "long_T": long_T,
            "autocast": list(gate_autocast(dev, autocast)),
            "lengths": _key_lengths(lengths),
        },
    }


def cell_lengths(cell: Any) -> tuple[int, ...]:
    """The sequence lengths a cell runs its variant at, for the leak checks to probe: its
    training length (``seq_len``) and the longest length it evaluates (``eval_lengths``) or
    times (a speed sweep's longest length, decode contexts plus the tokens stepped). Read from
    the cell's spec by name, so any experiment kind with these fields is covered."""
    spec = getattr(cell, "spec", None)
    out: set[int] = set()
    seq_len = getattr(spec, "seq_len", None)
    if isinstance(seq_len, int):
        out.add(seq_len)
    evaluated = getattr(spec, "eval_lengths", None)
    if evaluated:
        out.add(max(evaluated))
    timed = getattr(spec, "context_needed", None)  # a speed sweep: its longest length per mode
    longest = timed() if callable(timed) else None
    if isinstance(longest, int):
        out.add(longest)
    return tuple(sorted(n for n in out if n >= 2))


def gate_config(variant: Variant, options: Any = None) -> ModelConfig:
    config = default_config(variant)
    return config if options is None else config.replace(options=options)


def gate_key(
    variant: Variant, device: torch.device, options: Any = None, autocast: tuple[str, ...] | None = None
) -> str:
    return content_key(gate_key_inputs(variant, device, config=gate_config(variant, options), autocast=autocast))


def _from_rows(rows: list[dict[str, Any]]) -> list[CheckResult] | None:
    by_name = {r["check_name"]: r for r in rows}
    if set(by_name) != set(CHECKS):
        return None
    return [
        CheckResult(c, by_name[c]["status"], by_name[c]["figure"], by_name[c]["tolerance"], by_name[c]["detail"])
        for c in CHECKS
    ]


def _cacheable(results: list[CheckResult]) -> bool:
    """Verdicts shaped by machine load (time-outs) are not cached."""
    return not any("timed out" in r.detail or r.detail.startswith("not run") for r in results)


def gate_variant(
    variant: Variant,
    store: Store | None,
    device: torch.device,
    *,
    options: Any = None,
    use_cache: bool = True,
    **check_kwargs: Any,
) -> Verdict:
    """The variant's verdict: cached in ``store`` under its key, else the checks run now. A
    failed check's detail ends with the command that reproduces it (``Verdict.command``)."""
    config = gate_config(variant, options)
    keyed = {k: v for k, v in check_kwargs.items() if k in ("long_T", "autocast", "lengths")}
    key = content_key(gate_key_inputs(variant, device, config=config, **keyed))
    lengths = tuple(sorted(set(check_kwargs.get("lengths") or ())))
    autocast = gate_autocast(device, check_kwargs.get("autocast"))
    command = check_command(
        variant, device, options, lengths=lengths, autocast=autocast, store=None if store is None else store.path
    )
    if store is not None and use_cache:
        cached = _from_rows(store.checks(gate_key=key))
        if cached is not None:
            return Verdict(variant.name, key, cached, True, command)
    results = [
        r if r.ok else replace(r, detail=f"{r.detail}; reproduce: `{command}`")
        for r in run_checks(variant, device=device, config=config, **check_kwargs)
    ]
    if store is not None and _cacheable(results):
        settings = {
            "code_key": code_key(variant, device),
            "lengths": list(lengths),
            "options": option_changes(variant, options),
            "autocast": list(autocast),
        }
        meta = {**provenance(device), "gate_key": key, "gate_settings": settings}
        store.save_checks(key, variant.name, results, meta)
    return Verdict(variant.name, key, results, False, command)


def cached_verdict(variant: Variant, store: Store, device: torch.device) -> Verdict | None:
    """The stored verdict for the variant's current code with default options, if any."""
    key = gate_key(variant, device)
    results = _from_rows(store.checks(gate_key=key))
    return Verdict(variant.name, key, results, True) if results else None
