"""`attnbench export CHECKPOINT OUT_DIR`: a trained checkpoint as a Hugging Face model folder.

attnbench export results/checkpoints/KEY.pt exported/
lm_eval --model hf --model_args pretrained=exported,trust_remote_code=True ...
"""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a trained checkpoint as a Hugging Face model folder",
        description="Write CHECKPOINT (a '<cell key>.pt' file a train cell kept) as a Hugging Face model "
        "folder that AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True), "
        "AutoTokenizer and `lm_eval --model hf` load (needs pip install 'attnbench[hf]').",
    )
    p.add_argument("checkpoint", help="the '.pt' checkpoint file of a trained cell")
    p.add_argument("out_dir", help="folder to write (must be new or empty unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing non-empty OUT_DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnbench.export.writer import export_checkpoint
    from attnbench.registry.loader import load_registry

    info = export_checkpoint(args.checkpoint, args.out_dir, load_registry(), overwrite=args.overwrite)
    print(f"exported {info.variant} ({info.n_params:,} parameters, {info.tokenizer} tokenizer) to {info.out_dir}")
    print(f"load it with AutoModelForCausalLM.from_pretrained({str(info.out_dir)!r}, trust_remote_code=True)")
    return 0
