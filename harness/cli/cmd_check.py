"""`attnbench check [VARIANT ...]`: the trust gate, as a table of variants x checks."""

from __future__ import annotations

import argparse

from attnbench.cli.common import add_store_option, positive_int, positive_seconds, registry_with_warnings


def _length(raw: str) -> int:
    """An argparse type: a sequence length, a whole number of at least 2 tokens."""
    value = positive_int(raw)
    if value < 2:
        raise argparse.ArgumentTypeError(f"{raw} is not a sequence length; give 2 tokens or more")
    return value


def _option(raw: str) -> tuple[str, object]:
    """An argparse type: NAME=VALUE, the value read as YAML (as a suite's variant_options)."""
    import yaml

    name, sep, value = raw.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{raw!r} is not NAME=VALUE (e.g. windows=[4,4])")
    try:
        return name.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{raw!r}: the value is not YAML ({exc})") from exc


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="verify variants: no future leak, incremental = parallel, finite, deterministic, declared facts hold",
        description="Run the trust gate on each variant and print a variants x checks table. Each verdict is "
        "written into the results store (--store; default results/attnbench.sqlite under the current folder, "
        "created if missing), where `attnbench run` and the report read it; a verdict stored for the same code, "
        "device and settings is reused unless --no-cache (verdicts of checks that timed out are not stored).",
    )
    p.add_argument("variants", nargs="*", help="variants to check (default: all registered)")
    add_store_option(p, what="store the verdicts are written into and reused from")
    p.add_argument("--device", default="auto", help="cpu, cuda, ... (default: auto)")
    p.add_argument("--no-cache", action="store_true", help="re-run checks even if a verdict is stored")
    # defaults (the gate's own) are filled in by run, so that --help does not import the gate and torch
    p.add_argument("--long-T", type=positive_int, help="length of the long-input check (default: the gate's, 2048)")
    p.add_argument("--time-limit", type=positive_seconds, help="seconds per variant (default: the gate's, 300)")
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16", "auto"),
        default="fp32",
        help="a CPU's train.precision to check for: bf16 (or auto where its probe picks bf16) adds the bf16 "
        "autocast checks with bf16's tolerances (default fp32; CUDA always checks bf16 and fp16)",
    )
    p.add_argument(
        "--lengths",
        type=_length,
        nargs="+",
        metavar="T",
        help="sequence lengths an experiment runs the variants at: both leak checks probe each once more "
        "(as `attnbench run` does with each experiment's training length and the longest it evaluates or times)",
    )
    p.add_argument(
        "--option",
        type=_option,
        action="append",
        metavar="NAME=VALUE",
        help="a variant option (as a suite's variant_options; repeatable): check the variant built with it, "
        "as a run whose refusal names this command did",
    )
    p.add_argument(
        "--verbose", action="store_true", help="print each check's detail line (an error's exception chain included)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnbench.gate.checks import DEFAULT_LONG_T, DEFAULT_TIME_LIMIT_S, format_table
    from attnbench.gate.verdicts import gate_variant
    from attnbench.nn.precision import resolve
    from attnbench.store.database import Store
    from attnbench.store.provenance import resolve_device

    long_T = args.long_T or DEFAULT_LONG_T
    time_limit_s = args.time_limit or DEFAULT_TIME_LIMIT_S
    registry = registry_with_warnings()
    names = args.variants or registry.names()
    variants = [registry.get(n) for n in names]  # unknown names: error with "did you mean"
    device = resolve_device(args.device)
    autocast = None  # CUDA: the gate's default, bf16 and fp16
    if device.type == "cpu":
        autocast = ("bf16",) if resolve(device, args.precision).dtype == "bf16-autocast" else ()
    raw_options = dict(args.option or [])
    if raw_options and len(variants) != 1:
        raise SystemExit("attnbench check: --option applies to one variant; name exactly one")
    options = variants[0].make_options(raw_options) if raw_options else None  # ValueError names a bad key
    results = {}
    with Store(args.store) as store:
        for v in variants:
            verdict = gate_variant(
                v,
                store,
                device,
                options=options,
                use_cache=not args.no_cache,
                long_T=long_T,
                time_limit_s=time_limit_s,
                autocast=autocast,
                lengths=tuple(args.lengths or ()),
            )
            results[v.name] = verdict.results
    print(format_table(results, verbose=args.verbose))
    failed = [n for n, rs in results.items() if any(r.status in ("fail", "error") for r in rs)]
    return 1 if failed or registry.errors else 0
