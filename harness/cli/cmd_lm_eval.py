"""`attnbench lm-eval ...`: lm-eval's own command line with the `attnbench` model registered.

lm-eval finds models only by import, so this command imports the model class, then hands
every argument, unchanged, to lm-eval's console entry point: its flags, its output files.

    attnbench lm-eval --model attnbench --model_args checkpoint=results/checkpoints/KEY.pt \\
        --tasks attnbench_heldout_text --include_path suites/lm_eval_tasks \\
        --metadata '{"text_path": "/abs/heldout.txt"}' --device cpu --output_path out/
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lm-eval",
        add_help=False,
        prefix_chars="\0",  # every argument, -h included, goes to lm-eval
        help="run lm-eval's command line with trained checkpoints as --model attnbench",
        description="All arguments are lm-eval's (see `attnbench lm-eval --help`).",
    )
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def model_help() -> str:
    """The attnbench model's arguments, printed before lm-eval's own --help."""
    from attnbench.experiments.lm_eval.model import MODEL_ARGS

    lines = ["attnbench model (--model attnbench --model_args NAME=VALUE,...):"]
    lines += [f"  {name:<15} {what}" for name, what in MODEL_ARGS.items()]
    lines += [
        "Exported models (`attnbench export`) run as --model hf --model_args pretrained=DIR,trust_remote_code=True.",
        "",
        "lm-eval's own arguments follow.",
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from lm_eval.__main__ import cli_evaluate

    import attnbench.experiments.lm_eval.model  # noqa: F401  (registers --model attnbench)

    if any(a in ("-h", "--help") for a in args.lm_eval_args):
        print(model_help(), flush=True)

    given = args.lm_eval_args
    if not any(a == "--device" or a.startswith("--device=") for a in given):
        given = [*given, "--device", "auto"]  # lm-eval's own default, cuda:0, reads as a request for it
    saved = sys.argv
    sys.argv = ["lm-eval", *given]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0
