"""The trust gate: checks any registered variant, through the public contract only, before
its numbers are recorded.

    results = run_checks(variant, device="cpu")      # -> list[CheckResult], one per CHECKS
    print(format_table({variant.name: results}))

Each check is isolated: an exception (a builder that raises, a mixer returning the wrong
shape or dtype) becomes an "error" result and the other checks still run. All checks of one
variant run in a worker *thread* with a per-variant time limit; see ``run_checks``.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import Variant
from attnbench.gate.common import (
    DEFAULT_LONG_T,
    DETERMINISTIC_TOL,
    FACTS_TOL,
    INCREMENTAL_T,
    INCREMENTAL_TOL,
    INPUT_SCALE,
    LEAK_BACKWARD_TOL,
    LEAK_FORWARD_TOL,
    Check,
    CheckContext,
    CheckResult,
    ContractError,
    fmt,
)
from attnbench.gate.decode import check_declared_facts, check_incremental
from attnbench.gate.finite_diff import FD_TOL, check_grad_finite_difference
from attnbench.gate.gradients import GRAD_TOL, check_grad_float64_at_scale
from attnbench.gate.leak import check_backward_leak, check_forward_leak
from attnbench.gate.numeric import check_deterministic, check_finite
from attnbench.gate.reuse import Reuse
from attnbench.gate.scale import (
    AUTOCAST_TOL,
    FLOAT64_TOL,
    SCALE_FACTORS,
    SCALE_LEAK_TOL,
    check_autocast_at_scale,
    check_float64_at_scale,
    check_incremental_at_scale,
    check_leak_at_scale,
)

__all__ = [
    "CHECKS",
    "CheckResult",
    "DEFAULT_LONG_T",
    "DEFAULT_TIME_LIMIT_S",
    "default_config",
    "format_table",
    "gate_autocast",
    "gate_lengths",
    "passed",
    "run_checks",
    "check_variants",
]

CHECKS: tuple[str, ...] = (
    "no_future_leak_forward",
    "no_future_leak_backward",
    "incremental_equals_parallel",
    "finite_long_inputs",
    "deterministic",
    "declared_facts",
    "leak_at_scale",
    "incremental_at_scale",
    "float64_at_scale",
    "grad_float64_at_scale",
    "grad_finite_difference",
    "autocast_at_scale",
)
_FUNCS: dict[str, Check] = {
    "no_future_leak_forward": check_forward_leak,
    "no_future_leak_backward": check_backward_leak,
    "incremental_equals_parallel": check_incremental,
    "finite_long_inputs": check_finite,
    "deterministic": check_deterministic,
    "declared_facts": check_declared_facts,
    "leak_at_scale": check_leak_at_scale,
    "incremental_at_scale": check_incremental_at_scale,
    "float64_at_scale": check_float64_at_scale,
    "grad_float64_at_scale": check_grad_float64_at_scale,
    "grad_finite_difference": check_grad_finite_difference,
    "autocast_at_scale": check_autocast_at_scale,
}
_SHORT = {
    "no_future_leak_forward": "leak-fwd",
    "no_future_leak_backward": "leak-bwd",
    "incremental_equals_parallel": "incremental",
    "finite_long_inputs": "finite",
    "deterministic": "determinism",
    "declared_facts": "facts",
    "leak_at_scale": "leak@scale",
    "incremental_at_scale": "incr@scale",
    "float64_at_scale": "f64@scale",
    "grad_float64_at_scale": "grad@scale",
    "grad_finite_difference": "grad-fd",
    "autocast_at_scale": "amp@scale",
}
DEFAULT_TIME_LIMIT_S = 300.0

GATE_CODE = ("attnbench.gate", "attnbench.contract", "attnbench.nn")
# The code a verdict depends on: the gate itself and the shared model it builds.


def default_config(variant: Variant) -> ModelConfig:
    """The small model every check uses: 2 layers (a hybrid: one period of its pattern, so
    every layer type is built), d_model 32, 2 heads (h = 16), bytes vocabulary, context 512
    (> the 320-token incremental check), the variant's default options."""
    return ModelConfig(
        vocab_size=256,
        d_model=32,
        n_layer=max(2, len(getattr(variant, "parts", ()))),
        n_head=2,
        context=512,
        mlp_ratio=4,
        dropout=0.0,
        bias=True,
        options=variant.make_options(None),
    )


def _describe_one(exc: BaseException) -> str:
    """'Type: message (at file.py:line)', one line, pointing at the innermost non-torch frame."""
    msg = " ".join(str(exc).split()) or "(no message)"
    if len(msg) > 300:
        msg = msg[:297] + "..."
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    at = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    if isinstance(exc, ContractError):  # the message names the offender; the frame is ours
        at = ""
    return f"{type(exc).__name__}: {msg}{at}"


def _describe(exc: BaseException) -> str:
    """The exception and its chain, one line: 'Type: message (at file.py:line); caused by
    Type: message (at ...)' for ``raise ... from``, '; while handling Type: ...' for an
    exception raised inside an ``except`` (``__context__``, unless ``from None`` hid it). Up to
    ``_CHAIN`` links; a cycle ends it. Stored as the verdict's detail, so the cause survives."""
    parts, seen = [], set()
    link: BaseException | None = exc
    how = ""
    while link is not None and id(link) not in seen and len(parts) < _CHAIN:
        seen.add(id(link))
        parts.append(how + _describe_one(link))
        if link.__cause__ is not None:
            link, how = link.__cause__, "caused by "
        elif link.__context__ is not None and not link.__suppress_context__:
            link, how = link.__context__, "while handling "
        else:
            link = None
    if link is not None and id(link) not in seen:
        parts.append("...")
    return "; ".join(parts)


_CHAIN = 5  # links of an exception chain kept in a verdict's detail


# Checks that do not read the experiment's lengths: run once per process (``gate.reuse``).
_LENGTH_FREE = frozenset(CHECKS) - {"no_future_leak_forward", "no_future_leak_backward", "incremental_equals_parallel"}


def _run_one(name: str, ctx: CheckContext) -> CheckResult:
    try:
        if name in _LENGTH_FREE:
            return ctx.reuse.get(("check", name), lambda: _FUNCS[name](ctx), keep=lambda r: r.status != "error")
        return _FUNCS[name](ctx)
    # Isolation: one broken check never stops the others. BaseException too: this runs in
    # a worker thread, where a plugin's sys.exit() would otherwise end the thread silently.
    except BaseException as exc:
        return CheckResult(name, "error", None, None, _describe(exc))


def run_checks(
    variant: Variant,
    *,
    device: str | torch.device = "cpu",
    config: ModelConfig | None = None,
    long_T: int = DEFAULT_LONG_T,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    seed: int = 0,
    autocast: Iterable[str] | None = None,
    lengths: Iterable[int] = (),
) -> list[CheckResult]:
    """Run every check in ``CHECKS`` on one variant; one result per check, in order.

    config: the model the checks build (default ``default_config(variant)``); options left
        None are filled with the variant's defaults. The finite check widens ``context``
        to ``long_T``.
    long_T: sequence length of the finite-on-long-inputs check.
    time_limit_s: wall-clock budget for all checks of this variant. They run in a daemon
        worker thread, not a subprocess: variants registered in-process (tests, notebooks)
        cannot be re-imported in a child, a spawned child would pay the torch import and
        plugin loading per variant, and CUDA does not survive fork. The price: Python
        cannot kill a thread, so a check past the limit is reported as "error: timed out"
        and abandoned (it may keep a core busy until the process exits; the CLI exits
        after reporting). A hang inside C code that holds the GIL is not interruptible.
    seed: seeds every build and every random input.
    autocast: the autocast dtypes ("bf16", "fp16") the variant will train under, each checked
        with its own tolerances (finite_long_inputs, autocast_at_scale). Default: both on
        CUDA, none on a CPU (fp32); a CPU run at train.precision bf16 passes ("bf16",).
    lengths: the sequence lengths the experiment runs the variant at (``verdicts.cell_lengths`` of a
        cell: its training length and the longest it evaluates or times); both leak checks
        probe each of them and the incremental check decodes there, besides their fixed lengths.
        Within a process each length, and each check's part that does not read them, runs once
        (``gate.reuse``): a variant gated again pays only for the lengths that are new.

    The checks run with one intra-op CPU thread and fp32 matmuls at "highest" precision;
    both settings, and the caller's RNG state, are restored afterwards.
    """
    if long_T < 2:
        raise ValueError(f"long_T must be at least 2, got {long_T}")
    if not time_limit_s > 0:
        raise ValueError(f"time_limit_s must be positive, got {time_limit_s}")
    try:
        config = config or default_config(variant)
        if config.options is None and variant.options is not None:
            config = config.replace(options=variant.make_options(None))
        dev, amp = torch.device(device), gate_autocast(device, autocast)
        reuse = Reuse.of(variant, config, dev, long_T, seed, amp)
        ctx = CheckContext(variant, config, dev, long_T, seed, amp, gate_lengths(lengths), reuse)
    except Exception as exc:
        return [CheckResult(c, "error", None, None, f"setup: {_describe(exc)}") for c in CHECKS]
    return _run_with_time_limit(ctx, time_limit_s)


def gate_lengths(lengths: Iterable[int]) -> tuple[int, ...]:
    """The experiment lengths to probe, sorted, each once; each an integer >= 2."""
    out = tuple(sorted(set(lengths)))
    bad = [n for n in out if isinstance(n, bool) or not isinstance(n, int) or n < 2]
    if bad:
        raise ValueError(f"gate lengths must be integers >= 2 (sequence lengths in tokens), got {bad}")
    return out


def gate_autocast(device: str | torch.device, autocast: Iterable[str] | None = None) -> tuple[str, ...]:
    """The autocast dtypes the gate checks: those asked, else the device's default (CUDA:
    bf16 and fp16; a CPU: none, since it trains in fp32 unless train.precision says bf16)."""
    if autocast is None:
        return tuple(AUTOCAST_TOL) if torch.device(device).type == "cuda" else ()
    asked = tuple(dict.fromkeys(autocast))
    unknown = [a for a in asked if a not in AUTOCAST_TOL]
    if unknown:
        raise ValueError(f"autocast dtypes must be among {list(AUTOCAST_TOL)}, got {unknown}")
    return asked


def _run_with_time_limit(ctx: CheckContext, time_limit_s: float) -> list[CheckResult]:
    results: list[CheckResult] = []
    current = [CHECKS[0]]
    lock, cancelled = threading.Lock(), threading.Event()
    cuda = [ctx.device.index or 0] if ctx.device.type == "cuda" else []

    def work() -> None:
        with torch.random.fork_rng(devices=cuda):  # leave the caller's RNG state as it was
            for name in CHECKS:
                with lock:
                    if cancelled.is_set():
                        return
                    current[0] = name
                result = _run_one(name, ctx)
                with lock:
                    if cancelled.is_set():
                        return
                    results.append(result)
            with lock:
                if not cancelled.is_set():  # finished in time, under the settings below
                    ctx.reuse.keep()

    precision, threads = torch.get_float32_matmul_precision(), torch.get_num_threads()
    torch.set_float32_matmul_precision("highest")  # no TF32: tolerances are for true fp32
    # One intra-op thread: the check models are tiny, the figures then do not depend on the
    # machine's core count, and on a shared machine OpenMP spin-waiting cost ~10x CPU time.
    torch.set_num_threads(1)
    try:
        worker = threading.Thread(target=work, name=f"attnbench-check-{ctx.variant.name}", daemon=True)
        worker.start()
        worker.join(time_limit_s)
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.set_num_threads(threads)
    with lock:
        if not worker.is_alive():
            return list(results)
        cancelled.set()
        out = list(results)
    for name in CHECKS[len(out) :]:
        why = (
            f"timed out after {time_limit_s:g} s (per-variant limit; abandoned in a background thread)"
            if name == current[0]
            else f"not run: the variant's {time_limit_s:g} s time limit was spent"
        )
        out.append(CheckResult(name, "error", None, None, why))
    return out


def check_variants(variants: Iterable[Variant], **kwargs: Any) -> dict[str, list[CheckResult]]:
    """``run_checks`` on each variant in turn (keyword arguments passed on), by name."""
    return {v.name: run_checks(v, **kwargs) for v in variants}


def passed(results: Iterable[CheckResult]) -> bool:
    """True when no check failed or errored (skips are fine)."""
    return all(r.status in ("pass", "skip") for r in results)


def _cell(result: CheckResult | None) -> str:
    if result is None:
        return "-"
    label = result.status if result.status in ("pass", "skip") else result.status.upper()
    return label if result.figure is None else f"{label} {fmt(result.figure)}"


def format_table(results: dict[str, list[CheckResult]], *, verbose: bool = False) -> str:
    """Plain-text table, variants x checks, each cell 'status figure'; then one line per
    failed or errored check (every check when ``verbose``) with tolerance and detail."""
    header = ["variant", *(_SHORT[c] for c in CHECKS)]
    rows = [
        [name, *(_cell(next((r for r in rs if r.check == c), None)) for c in CHECKS)] for name, rs in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.append(
        f"figures: leak-fwd max|d logits|/max|logits| (tol {LEAK_FORWARD_TOL:g}); leak-bwd "
        f"max|d y_t/d x_>t| (tol {LEAK_BACKWARD_TOL:g}); incremental max|d logits|/max|logits| "
        f"at T={INCREMENTAL_T} (tol {INCREMENTAL_TOL:g}); finite max|output or grad| at inputs "
        f"x{INPUT_SCALE:g}; determinism max|run1-run2| (tol {DETERMINISTIC_TOL:g}); facts "
        f"|state elements - declared| (tol {FACTS_TOL:g}); @scale: mixer weights "
        f"x{'/'.join(f'{f:g}' for f in SCALE_FACTORS)} with an extreme early token, leak "
        f"relative (tol {SCALE_LEAK_TOL:g}), fp32 vs float64 relative (tol {FLOAT64_TOL:g}), "
        "amp per autocast dtype (CUDA: bf16 and fp16; a CPU: bf16 when it trains in it); grad@scale "
        "the worst parameter group's max|g - g64|/max|g64| over its bound (pass <= 1; bounds "
        + ", ".join(f"{k} {v:g}" for k, v in GRAD_TOL.items())
        + f"); grad-fd the worst group's float64 gradient against a float64 central difference along one "
        f"direction, relative (tol {FD_TOL:g})"
    )
    for name, rs in results.items():
        for r in rs:
            if verbose or r.status in ("fail", "error"):
                tol = "" if r.tolerance is None else f" (tol {fmt(r.tolerance)})"
                lines.append(f"{name} / {r.check}: {r.status.upper()} {fmt(r.figure)}{tol}: {r.detail}")
    ok = sum(passed(rs) for rs in results.values())
    lines.append(f"{ok}/{len(results)} variants passed every check")
    return "\n".join(lines)
