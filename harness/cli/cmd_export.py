"""`attnbench export CHECKPOINT OUT_DIR`: a trained checkpoint as a Hugging Face model folder;
`attnbench export --best VARIANT --experiment E OUT_DIR`: the protocol's chosen run of a variant.

    attnbench export results/checkpoints/KEY.pt exported/
    attnbench export --best linear --experiment text exported/ --heldout-text heldout.txt
    lm_eval --model hf --model_args pretrained=exported,trust_remote_code=True ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnbench.cli.common import add_store_option
from attnbench.errors import UsageError

SPLITS = ("test", "val")  # attnbench.export.heldout's (imported lazily: --help imports no torch)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a trained checkpoint as a Hugging Face model folder",
        usage="attnbench export [-h] [--overwrite] [--heldout-text FILE [--split {test,val}]] [--store STORE] "
        "CHECKPOINT OUT_DIR\n"
        "       attnbench export [-h] [--overwrite] [--heldout-text FILE [--split {test,val}]] --best VARIANT "
        "[--experiment E] [--suite S] [--store STORE] OUT_DIR",
        description="Write CHECKPOINT (a '<cell key>.pt' file a train cell kept), or with --best the "
        "protocol's chosen run of VARIANT (its grid point chosen on validation loss, then its "
        "seed with the lowest validation loss; see `attnbench checkpoints --chosen`), as a "
        "Hugging Face model folder that AutoModelForCausalLM.from_pretrained(OUT_DIR, "
        "trust_remote_code=True), AutoTokenizer and `lm_eval --model hf` load (needs pip install "
        "'attnbench[hf]').",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="[CHECKPOINT] OUT_DIR",
        help="the '.pt' checkpoint file of a trained cell (not with --best), then the folder to "
        "write (must be new or empty unless --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing non-empty OUT_DIR")
    p.add_argument("--best", metavar="VARIANT", help="export the protocol's chosen run of this variant")
    p.add_argument("--experiment", help="with --best: the train experiment (default: the one the variant trained in)")
    p.add_argument("--suite", help="with --best: the suite (default: the suite of the latest run)")
    p.add_argument(
        "--heldout-text",
        metavar="FILE",
        help="also write the held-out text of the run the checkpoint came from (the test split of its corpus, "
        "cut as its training cut it, e.g. the shipped tinyshakespeare's) to FILE: the text_path of lm-eval's "
        "attnbench_heldout_text task",
    )
    p.add_argument(
        "--split",
        choices=SPLITS,
        help="with --heldout-text: the split to write (default test; val where the run held out no test split)",
    )
    add_store_option(p, what="results store (--best, --heldout-text: the run's data)")
    p.set_defaults(func=run)


def _checkpoint_and_out(args: argparse.Namespace) -> tuple[str, str]:
    """(checkpoint file, OUT_DIR) from the arguments; with --best the checkpoint comes from the store."""
    if args.best is None:
        extra = [f"--{k}" for k in ("experiment", "suite") if getattr(args, k) is not None]
        if extra:
            raise UsageError(
                f"{' and '.join(extra)} {'go' if len(extra) > 1 else 'goes'} with --best VARIANT; "
                "give --best, or leave it out to export CHECKPOINT"
            )
        if len(args.paths) != 2:
            raise UsageError(
                f"export takes CHECKPOINT OUT_DIR (got {len(args.paths)} path(s)), or --best VARIANT "
                "OUT_DIR to export a variant's chosen run"
            )
        return args.paths[0], args.paths[1]
    if len(args.paths) != 1:
        raise UsageError(
            f"with --best {args.best} give only OUT_DIR (got {' '.join(args.paths)}): the checkpoint "
            "is the chosen run's"
        )
    from attnbench.report.checkpoints import best_checkpoint
    from attnbench.report.load import load_store
    from attnbench.report.values import point_text

    row = best_checkpoint(load_store(Path(args.store), args.suite), args.best, args.experiment)
    print(f"chosen run of {row.variant} in {row.experiment}: seed {row.seed}, {point_text(row.point)}, key {row.key}")
    return str(row.path), args.paths[0]


def run(args: argparse.Namespace) -> int:
    from attnbench.export.writer import export_checkpoint
    from attnbench.registry.loader import load_registry

    if args.split and not args.heldout_text:
        raise UsageError(f"--split {args.split} goes with --heldout-text FILE; give both, or neither")
    if args.heldout_text and not Path(args.store).is_file():
        raise UsageError(
            f"--heldout-text reads the run's data from the store, and {args.store} is no file; "
            "pass the --store the checkpoint was trained into"
        )
    checkpoint, out_dir = _checkpoint_and_out(args)
    info = export_checkpoint(checkpoint, out_dir, load_registry(), overwrite=args.overwrite)
    print(f"exported {info.variant} ({info.n_params:,} parameters, {info.tokenizer} tokenizer) to {info.out_dir}")
    print(f"load it with AutoModelForCausalLM.from_pretrained({str(info.out_dir)!r}, trust_remote_code=True)")
    if args.heldout_text:
        from attnbench.export.heldout import run_heldout_text
        from attnbench.store.database import Store

        with Store(args.store) as store:
            text = run_heldout_text(store, info.cell_key, args.split or "test", Path(args.heldout_text))
        print(f"wrote the {text.split} split of {text.corpus} ({text.n_bytes:,} bytes) to {text.path}")
        print(f"""score it: --tasks attnbench_heldout_text --metadata '{{"text_path": "{text.path}"}}'""")
    return 0
