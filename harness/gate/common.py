"""Shared pieces of the trust gate: the result type, the check context, tolerances, and
guarded builders that turn a contract violation (wrong type, shape or dtype) into an error
that names what was returned and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import MixerBuilder, MixerOutput, Variant
from attnbench.gate.reuse import Reuse
from attnbench.nn.backbone import Backbone
from attnbench.nn.model import LanguageModel

# Tolerances (fp32). Same-shape perturbations are bitwise equal for every correct mixer we
# know; 1e-5 leaves room for kernels whose blocking depends on T (the truncation test) and
# for CUDA reductions, and is far below what a one-token leak moves in a random-init model.
LEAK_FORWARD_TOL = 1e-5  # max |logits' - logits| at positions <= t / max |logits|
LEAK_BACKWARD_TOL = 0.0  # max |d y_t / d x_s| over s > t: must be exactly zero
# Incremental vs parallel forms sum in different orders; 300+ tokens of fp32 rounding stay
# around 1e-6 relative, real drift (a wrong decay, a lost count) is 1e-3 and up.
INCREMENTAL_TOL = 1e-4  # max |step logits - forward logits| / max |forward logits|
DETERMINISTIC_TOL = 0.0  # bitwise
FACTS_TOL = 0.0  # declared state elements must equal the measured ones exactly

INPUT_SCALE = 10.0  # the finite check scales its unit-variance inputs by this
LEAK_LENGTHS = (9, 40, 97)  # several lengths, none a power of two
BACKWARD_LENGTHS = (24, 61, 97)  # 97: past a 64-token chunk edge
INCREMENTAL_T = 320  # well past the 64-token chunk sizes and windows of the built-ins
CHUNK_SIZES = (1, 3, 7, 64)  # 3 and 7 do not divide INCREMENTAL_T
MIXED_SCHEDULE = (5, 1, 64, 2, 33)  # cycled: chunk boundaries at irregular positions
STATE_LENGTHS = (13, INCREMENTAL_T)
DEFAULT_LONG_T = 2048


class ContractError(Exception):
    """A mixer or model broke the variant contract (wrong type, shape or dtype)."""


@dataclass(frozen=True)
class CheckResult:
    """One named verdict of the trust gate.

    check: one of ``attnbench.gate.checks.CHECKS``.
    status: "pass", "fail", "skip" (not applicable, reason in detail) or "error" (the
        check could not run: an exception, a contract violation or a time-out).
    figure: the measured number (max deviation, max gradient, ...), None when not measured.
    tolerance: what ``figure`` is compared with, None when the verdict is not a threshold.
    detail: one line a human reads: what was measured, where, and for an error the exception.
    """

    check: str
    status: str
    figure: float | None
    tolerance: float | None
    detail: str

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")


@dataclass(frozen=True)
class CheckContext:
    variant: Variant
    config: ModelConfig  # small model config, options filled in
    device: torch.device
    long_T: int
    seed: int
    # autocast dtypes the variant will train under ("bf16", "fp16"): CUDA both; a CPU those
    # its train.precision resolves to (none for fp32). Checked with each dtype's tolerances.
    autocast: tuple[str, ...] = ()
    # the lengths the experiment runs the variant at (its training length, the longest it
    # evaluates or times): the leak checks probe each once more there (``leak.length_probes``).
    lengths: tuple[int, ...] = ()
    # parts computed once per process (length-free checks, fixed lengths, each experiment length)
    reuse: Reuse = field(default_factory=Reuse, compare=False, repr=False)


def verdict(check: str, figure: float | None, tol: float, detail: str) -> CheckResult:
    """pass when ``figure`` is a finite number <= ``tol``; a NaN or inf figure fails."""
    ok = figure is not None and math.isfinite(figure) and figure <= tol
    return CheckResult(check, "pass" if ok else "fail", figure, tol, detail)


def _check_mixer_output(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
    """Forward hook: a mixer maps x (B, T, D) to y (B, T, D) of x's dtype (autocast aside)."""
    x = args[0] if args else None
    y = output.y if isinstance(output, MixerOutput) else output
    if not isinstance(y, torch.Tensor):
        raise ContractError(
            f"mixer {type(module).__name__}.forward returned {type(output).__name__}; "
            "expected a Tensor (B, T, D) or a MixerOutput"
        )
    if isinstance(x, torch.Tensor):
        if y.shape != x.shape:
            raise ContractError(
                f"mixer {type(module).__name__}.forward returned shape {tuple(y.shape)} "
                f"for input {tuple(x.shape)}; expected {tuple(x.shape)}"
            )
        if not torch.is_autocast_enabled(x.device.type) and y.dtype != x.dtype:
            raise ContractError(
                f"mixer {type(module).__name__}.forward returned {y.dtype} for a {x.dtype} "
                "input outside autocast; expected the input's dtype"
            )


def guarded(build_mixer: MixerBuilder) -> MixerBuilder:
    """Wrap a mixer builder so every built mixer has its forward output checked."""

    def build(config: ModelConfig, layer_idx: int) -> nn.Module:
        mixer = build_mixer(config, layer_idx)
        if not isinstance(mixer, nn.Module):
            raise ContractError(
                f"build_mixer(config, {layer_idx}) returned {type(mixer).__name__}; expected a torch.nn.Module"
            )
        mixer.register_forward_hook(_check_mixer_output)
        return mixer

    return build


def layer_types(ctx: CheckContext) -> list[tuple[int, str]]:
    """(first layer, label) of each distinct layer type of the checked model: layer 0 of a
    plain variant; the first layer of each part of a hybrid (every type, not only layer 0's)."""
    parts = getattr(ctx.variant, "parts", ())
    if not parts:
        return [(0, ctx.variant.name)]
    first: dict[str, int] = {}
    for i in range(ctx.config.n_layer):
        first.setdefault(parts[i % len(parts)].label, i)
    return [(i, label) for label, i in first.items()]


def build_mixer(ctx: CheckContext, layer_idx: int, config: ModelConfig | None = None) -> nn.Module:
    """The bare mixer of one layer, seeded, on the check device, fp32."""
    torch.manual_seed(ctx.seed + layer_idx)
    return guarded(ctx.variant.build_mixer)(config or ctx.config, layer_idx).to(ctx.device)


def models(ctx: CheckContext, config: ModelConfig | None = None) -> list[tuple[str, LanguageModel]]:
    """The shared backbone with the variant's mixers and, if declared, its own model."""
    config = config or ctx.config
    torch.manual_seed(ctx.seed)
    out: list[tuple[str, LanguageModel]] = [
        ("backbone", Backbone(config, guarded(ctx.variant.build_mixer)).to(ctx.device))
    ]
    if ctx.variant.build_model is not None:
        torch.manual_seed(ctx.seed)
        own = ctx.variant.build_model(config)
        if not isinstance(own, LanguageModel):
            raise ContractError(f"build_model(config) returned {type(own).__name__}; expected a LanguageModel")
        out.append(("own model", own.to(ctx.device)))
    return out


def logits_of(out: Any, shape: tuple[int, ...], where: str) -> torch.Tensor:
    """The logits of a model's output, checked to be (B, T, V) floating point."""
    logits = getattr(out, "logits", out)
    if not isinstance(logits, torch.Tensor):
        raise ContractError(f"{where} returned {type(out).__name__}; expected a ModelOutput")
    if tuple(logits.shape) != shape or not logits.is_floating_point():
        raise ContractError(
            f"{where} returned logits {tuple(logits.shape)} {logits.dtype}; expected {shape} floating point"
        )
    return logits.float()


def mixer_y(out: Any) -> torch.Tensor:
    return out.y if isinstance(out, MixerOutput) else out


def tokens(ctx: CheckContext, batch: int, T: int, offset: int = 0) -> torch.Tensor:
    """Seeded random token ids (B, T), drawn on CPU so every device sees the same ones."""
    gen = torch.Generator().manual_seed(ctx.seed * 1000 + 17 * T + offset)
    return torch.randint(ctx.config.vocab_size, (batch, T), generator=gen).to(ctx.device)  # (B, T)


def normal(ctx: CheckContext, *shape: int, offset: int = 0) -> torch.Tensor:
    """Seeded unit-normal floats of ``shape`` on the check device (fp32)."""
    gen = torch.Generator().manual_seed(ctx.seed * 1000 + 31 * sum(shape) + offset)
    return torch.randn(*shape, generator=gen).to(ctx.device)


def rel_dev(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | float) -> float:
    """max |got - ref| / scale as a float (NaN anywhere gives NaN)."""
    diff = (got.float() - ref.float()).abs()  # same shape as ref
    if torch.isnan(diff).any():
        return math.nan
    return float(diff.max()) / max(float(scale), 1e-30)


def is_worse(new: float, old: float) -> bool:
    """Whether ``new`` replaces ``old`` as the worst figure: NaN beats everything, then larger."""
    if math.isnan(old):
        return False
    return math.isnan(new) or new > old


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.2e}"


Check = Callable[[CheckContext], CheckResult]
