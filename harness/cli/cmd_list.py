"""`attnbench list`: registered variants with where they came from."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from attnbench.cli.common import add_store_option, registry_with_warnings
from attnbench.registry.identity import variant_identity
from attnbench.store.database import Store


def _gate_column(registry, store_path: str, device: str) -> dict[str, str]:
    """Each stored verdict of a variant's current code with what it covers ('pass (fixed lengths);
    FAIL no_future_leak_forward (fixed lengths + T 64/2048)'), or 'unchecked'."""
    if not Path(store_path).is_file():
        return {}
    from attnbench.gate.reproduce import coverage  # torch: only when there are verdicts to read
    from attnbench.gate.verdicts import cached_verdict
    from attnbench.store.provenance import resolve_device

    dev = resolve_device(device)
    out = {}
    with Store(store_path) as store:
        for name, v in registry.variants.items():
            found = coverage(store_path, v, dev)
            if found:
                out[name] = "; ".join(
                    ("pass" if status == "pass" else "FAIL: " + ",".join(failed)) + f" ({covers})"
                    for status, failed, covers in found
                )
                continue
            verdict = cached_verdict(v, store, dev)  # stored before verdicts named their settings
            out[name] = (
                "unchecked" if verdict is None else ("FAIL: " + ",".join(verdict.failed) if verdict.failed else "pass")
            )
    return out


def _options(variant) -> list[str]:
    """'name=default' per option of the variant's options dataclass, with the accepted
    values where it declares them (a ``CHOICES`` class attribute: option -> values)."""
    if variant.options is None or not dataclasses.is_dataclass(variant.options):
        return []
    choices = getattr(variant.options, "CHOICES", {})
    out = []
    for f in dataclasses.fields(variant.options):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
        )
        one_of = f" (one of {', '.join(map(str, choices[f.name]))})" if f.name in choices else ""
        out.append(f"{f.name}={default!r}{one_of}")
    return out


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list registered variants, their plugin and capabilities")
    add_store_option(p)
    p.add_argument("--device", default="auto", help="device whose trust-gate verdicts to show")
    p.add_argument(
        "--options", action="store_true", help="also list each variant's options with defaults and accepted values"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print variants and tasks as JSON, with the source files hashed into each identity",
    )
    p.set_defaults(func=run)


def _json(registry, gate: dict[str, str]) -> str:
    from attnbench.store.provenance import content_key

    def item(x, **extra):
        return {
            "name": x.name,
            "plugin": x.plugin,
            "distribution": x.distribution,
            "version": x.version,
            "description": x.description,
            "source_files": list(x.source_files),
            **extra,
        }

    variants = []
    for name in registry.names():
        v = registry.variants[name]
        identity = variant_identity(v)
        variants.append(
            item(
                v,
                decode=v.decode,
                causal=v.causal,
                aux_loss=v.aux_loss,
                own_model=v.build_model is not None,
                checks=gate.get(name, "unchecked"),
                identity=content_key(identity)[:16],
                sources=identity["sources"],
                options=_options(v),
            )
        )
    tasks = [item(t) for _, t in sorted(registry.tasks.items())]
    return json.dumps({"variants": variants, "tasks": tasks}, indent=2)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings()
    gate = _gate_column(registry, args.store, args.device)
    if args.json:
        print(_json(registry, gate))
        return 0
    rows = [("variant", "plugin", "distribution", "decode", "capabilities", "checks", "description")]
    for name in registry.names():
        v = registry.variants[name]
        caps = [
            k
            for k, on in (("causal", v.causal), ("aux-loss", v.aux_loss), ("own-model", v.build_model is not None))
            if on
        ]
        rows.append(
            (name, v.plugin, v.distribution, v.decode, ",".join(caps), gate.get(name, "unchecked"), v.description)
        )
    _print_table(rows)
    if registry.tasks:
        print()
        tasks = [("task", "plugin", "distribution", "description")]
        tasks += [(t.name, t.plugin, t.distribution, t.description) for _, t in sorted(registry.tasks.items())]
        _print_table(tasks)
    if args.options:
        print("\nvariant options (suite: variant_options: {variant: {option: value}})")
        for name in registry.names():
            opts = _options(registry.variants[name])
            if opts:
                print(f"  {name}: " + "; ".join(opts))
    return 0


def _print_table(rows: list[tuple[str, ...]]) -> None:
    """Aligned columns; the last column (a description) is left ragged."""
    n = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(n)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:n], widths, strict=True)) + "  " + r[n])
