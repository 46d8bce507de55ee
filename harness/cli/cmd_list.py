"""`attnbench list`: registered variants with where they came from."""

from __future__ import annotations

import argparse

from .common import registry_with_warnings


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list registered variants, their plugin and capabilities")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_with_warnings()
    rows = [("variant", "plugin", "distribution", "decode", "capabilities", "description")]
    for name in registry.names():
        v = registry.variants[name]
        caps = [k for k, on in (("causal", v.causal), ("aux-loss", v.aux_loss),
                                ("own-model", v.build_model is not None)) if on]
        rows.append((name, v.plugin, v.distribution, v.decode, ",".join(caps), v.description))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
    return 0
