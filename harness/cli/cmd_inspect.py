"""`attnbench inspect CHECKPOINT --text "..."`: what each layer and head attends to."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnbench.cli.common import registry_with_warnings


def add_parser(sub) -> None:
    p = sub.add_parser(
        "inspect",
        help="attention maps of a trained checkpoint on a text: PNG heatmaps, an HTML page, --json for the numbers",
    )
    p.add_argument("checkpoint", help="a '<cell key>.pt' model checkpoint (the store's checkpoints folder)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--text", help="the text to look at (read as bytes, for byte-level models; up to ~128 for readable pictures)"
    )
    what.add_argument(
        "--tokens",
        type=_ids,
        help="token ids to look at, space- or comma-separated, for models "
        "whose vocabulary is not bytes (e.g. an MQAR task model)",
    )
    p.add_argument("--out", default="inspect", help="output folder (default: ./inspect)")
    p.add_argument("--json", action="store_true", help="also write the weights as maps.json")
    p.set_defaults(func=run)


def _ids(value: str) -> list[int]:
    try:
        return [int(v) for v in value.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--tokens takes integer ids, e.g. --tokens '5 4099 12', not {value!r}"
        ) from None


def run(args: argparse.Namespace) -> int:
    from attnbench.explain.maps import inspect_checkpoint
    from attnbench.explain.render import check_out_dir, write_html, write_json, write_pngs

    out = Path(args.out)
    check_out_dir(out)
    ins = inspect_checkpoint(args.checkpoint, args.text, registry_with_warnings(), args.tokens)
    pngs = write_pngs(ins, out)
    page = write_html(ins, pngs, out)
    print(
        f"{ins.variant}: {len(ins.layers)} layers x {ins.layers[0].weights.shape[0]} heads "
        f"({ins.layers[0].kind}) on {len(ins.tokens)} tokens -> {page}"
    )
    if args.json:
        print(f"weights: {write_json(ins, out)}")
    return 0
