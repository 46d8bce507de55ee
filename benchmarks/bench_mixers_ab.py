"""This checkout's recurrent kernels against another checkout's, in one process (issue 42).

    git worktree add /tmp/old <commit>
    python benchmarks/bench_mixers_ab.py --old /tmp/old [--shape findings] [--repeats 5]

On a shared machine two runs of ``bench_mixers.py`` minutes apart differ by 2x at equal code.
Here each mixer's model is built once and its train step (forward + backward, one thread)
alternates between the old and the new kernels step by step: the old ``delta_kernel``,
``gla_kernel``, ``ssd_kernel``, ``taylor_kernel``, ``window_kernel``, Mamba2's convolution,
input and output paths, the short convolution (``ShortConv`` and ``kernels/short_conv``) and
DeltaNet's ``_heads`` are loaded from ``--old`` under other names and patched in. Prints the
best-of-repeats ms/step of each and new/old; a mixer whose code did not change (softmax,
linear) is the control.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

from attnbench import Backbone, ModelConfig
from attnbench.plugins.recurrent import (
    based_model,
    common,
    deltanet_model,
    gla_model,
    mamba2_model,
    retnet_model,
    swa_model,
)
from attnbench.registry.loader import load_registry
from attnbench.run.heap import keep_freed_heap

SHAPES = {"findings": (64, 2, 2, 64, 64), "long": (128, 2, 4, 8192, 1)}  # d, layers, heads, T, batch


def _load(old: Path, name: str, package: str = "recurrent") -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"old_{name}", old / "plugins" / package / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def kernel_sets(old: Path) -> dict[str, list[tuple[object, str, object]]]:
    """new/old: (owner, attribute, value) patches that select each checkout's kernels."""
    # the mixers are in <name>_model.py since their registrations import no torch; before, in <name>.py
    models = {
        n: f"{n}_model" if (old / "plugins" / "recurrent" / f"{n}_model.py").exists() else n
        for n in ("mamba2", "deltanet")
    }
    modules = ("delta_kernel", "gla_kernel", models["mamba2"], "common", "ssd_kernel", models["deltanet"])
    od, og, om, oc, os_, odn = (_load(old, n) for n in modules)
    ot, ow = _load(old, "taylor_kernel"), _load(old, "window_kernel")
    osc = _load(old, "short_conv", "kernels")
    for module in (om, oc):  # the old _conv and ShortConv.forward call the old convolution, always
        setattr(module, "causal_depthwise_conv", osc.causal_depthwise_conv)  # noqa: B010
    names = [
        (deltanet_model, "delta_rule"),
        (gla_model, "gated_linear_attention"),
        (retnet_model, "gated_linear_attention"),
        (mamba2_model, "ssd_scan"),
        (mamba2_model.Mamba2, "_conv"),
        (mamba2_model.Mamba2, "_ssm_inputs"),  # the projections, the split and x's layout
        (mamba2_model.Mamba2, "_out"),  # the skip, the gated norm and the output projection
        (common.ShortConv, "forward"),
        (deltanet_model.DeltaNet, "_heads"),
        (based_model, "taylor_attention"),
        (based_model, "window_attention"),
        (swa_model, "window_attention"),
    ]
    olds = [od.delta_rule, og.gated_linear_attention, og.gated_linear_attention, os_.ssd_scan, om.Mamba2._conv]
    olds += [om.Mamba2._ssm_inputs, om.Mamba2._out]
    olds += [oc.ShortConv.forward, odn.DeltaNet._heads, ot.taylor_attention, ow.window_attention, ow.window_attention]
    return {
        "new": [(owner, attr, getattr(owner, attr)) for owner, attr in names],
        "old": [(owner, attr, value) for (owner, attr), value in zip(names, olds, strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--shape", default="findings", choices=list(SHAPES))
    ap.add_argument("--variants", default="softmax,linear,based,swa,retnet,gla,deltanet,gated_deltanet,mamba2")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    keep_freed_heap()  # as a cell's process runs; both sides alike
    sets, registry = kernel_sets(args.old), load_registry()
    d, L, H, T, batch = SHAPES[args.shape]
    x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))  # (B, T) bytes
    load0, rows = os.getloadavg()[0], []
    for name in args.variants.split(","):
        config = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T)
        torch.manual_seed(0)
        model = Backbone(config, registry.get(name).build_mixer).train()
        best = {"old": float("inf"), "new": float("inf")}
        for i in range(args.repeats + 1):  # round 0 warms up; old and new alternate step by step
            for code, patches in sets.items():
                for owner, attr, value in patches:
                    setattr(owner, attr, value)
                start = time.perf_counter()
                model(x, x).loss.backward()
                model.zero_grad(set_to_none=True)
                if i:
                    best[code] = min(best[code], time.perf_counter() - start)
        for owner, attr, value in sets["new"]:
            setattr(owner, attr, value)
        rows.append((name, best["old"], best["new"]))
    print(f"{args.shape}: d {d}, {L} layers, {H} heads, T {T}, batch {batch}; best of {args.repeats}, one thread; "
          f"load1 {load0:.2f} -> {os.getloadavg()[0]:.2f}; old = {args.old}")  # fmt: skip
    print("| variant | old ms/step | new ms/step | new / old |")
    print("|---|---|---|---|")
    for name, o, n in rows:
        print(f"| {name} | {o * 1e3:.1f} | {n * 1e3:.1f} | {n / o:.2f} |")


if __name__ == "__main__":
    main()
