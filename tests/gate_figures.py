"""Figures of docs/trust.md that the gate's own code re-derives (issue 65). Not a test: run

    python -m tests.gate_figures decays      # the decay-gradient table (gate's configuration)
    python -m tests.gate_figures fd          # grad_finite_difference on the built-ins
    python -m tests.gate_figures time SUITE  # the gate's time on a suite's variants, as `run` gates them

time: one gate per (variant, options, autocast, lengths) of the suite's cells, no store, CPU; it
imports only what 97b26f5's gate had, so the same command times that commit's gate (with a copy of
its harness/ as attnbench/, plugins/ as attnbench/plugins/ and suites/ inside, on PYTHONPATH).

decays: fp32 gradient of each decay parameter against float64 at the gate's configuration
(``gradients._group_errors``: default_config, weights x1 and x4, T 260, the extreme early token),
worst of seeds 0-3; for GLA also with fla's naive fp32 recurrence patched into the same mixer.
"""

from __future__ import annotations

import sys

import torch

from attnbench.gate.checks import default_config, run_checks
from attnbench.gate.common import CheckContext
from attnbench.plugins.recurrent import gla_model
from attnbench.registry.loader import load_registry

PARAMS = {"mamba2": ("A_log", "dt_bias"), "gated_deltanet": ("A_log", "dt_bias"), "gla": ("gate_up.bias",)}


def _ctx(name: str, seed: int) -> CheckContext:
    variant = load_registry().get(name)
    return CheckContext(variant, default_config(variant), torch.device("cpu"), 2048, seed)


def _fla_gla(q, k, v, g, state, chunk, scale):
    """fla's naive fp32 recurrence where the run is fp32; ours in float64 (the reference)."""
    if q.dtype == torch.float64:
        return _OURS(q, k, v, g, state, chunk, scale)
    from fla.ops.gla.naive import naive_recurrent_gla  # scale d_k^-0.5, as ours

    o, s = naive_recurrent_gla(*(t.transpose(1, 2) for t in (q, k, v, g)))
    return o.transpose(1, 2), s


_OURS = gla_model.gated_linear_attention


def decays() -> None:
    from attnbench.gate.gradients import _group_errors

    for name, params in PARAMS.items():
        for who in ("ours", "fla") if name == "gla" else ("ours",):
            gla_model.gated_linear_attention = _fla_gla if who == "fla" else _OURS
            worst = {p: (0.0, "") for p in params}
            for seed in range(4):
                for factor in (1.0, 4.0):
                    errors = _group_errors(_ctx(name, seed), (factor, 1.0), 0, None)[0]
                    for p in params:
                        if errors[p] > worst[p][0]:
                            worst[p] = (errors[p], f"x{factor:g}")
            gla_model.gated_linear_attention = _OURS
            for p, (err, at) in worst.items():
                print(f"{name} {p} ({at}) {who} fp32: {err:.2g}")


def fd() -> None:
    from attnbench.gate.finite_diff import check_grad_finite_difference

    for name in ("softmax", "additive", "windowed", "linear", "heinsen", "future", "gla", "mamba2"):
        r = check_grad_finite_difference(_ctx(name, 0))
        print(f"{name}: {r.status} {r.figure:.2g}")


def time_suite(path: str) -> None:
    import time

    from attnbench.experiments.registry import expand_suite
    from attnbench.gate.verdicts import cell_lengths, gate_config
    from attnbench.plan.suite import load_suite

    registry = load_registry()
    gates = {}
    for cell in expand_suite(load_suite(path), registry):
        autocast = ("bf16",) if getattr(cell.spec, "precision", "fp32") in ("bf16", "auto") else ()
        gates.setdefault((cell.variant, repr(cell.model.options), autocast, cell_lengths(cell)), cell)
    total = 0.0
    for (name, _, autocast, lengths), cell in gates.items():
        variant, start = registry.get(name), time.perf_counter()
        config = gate_config(variant, cell.model.options)
        results = run_checks(variant, device="cpu", config=config, autocast=autocast, lengths=lengths)
        took = time.perf_counter() - start
        total += took
        bad = [r.check for r in results if r.status in ("fail", "error")]
        print(f"{name} T={'/'.join(map(str, lengths))}: {took:.1f} s {'failed ' + str(bad) if bad else 'pass'}")
    print(f"gate time {total:.1f} s over {len(gates)} gates")


if __name__ == "__main__":
    if sys.argv[1] == "time":
        time_suite(sys.argv[2])  # run_checks sets its own threads and precision
    else:
        torch.set_num_threads(1)
        torch.set_float32_matmul_precision("highest")
        {"decays": decays, "fd": fd}[sys.argv[1]]()
