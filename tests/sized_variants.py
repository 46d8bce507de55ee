"""Variants whose builders care about the model size, for the checks of every size a suite
uses (tests/test_model_sizes.py). Torch loads only when a model is built. Load through an
entry point:

    fake_distribution(tmp_path, "sized-dist", "sized", module="tests.sized_variants")

variant   at an odd head_dim
plain     builds (any size)
halves    its builder raises ValueError (declares nothing: only building finds it)
declared  declares ShapeConstraint.multiple_of("head_dim", 2, ...): refused without building

``CALLS`` counts what happened in this process: each mixer built (variant, d_model, n_head,
layer) and each forward (none may run when a suite is only validated).
"""

from __future__ import annotations

from typing import Any

from attnbench import ModelConfig, ShapeConstraint, Variant, hookimpl

CALLS: dict[str, Any] = {"built": [], "forward": 0}
WHY_EVEN = "each head is split into two halves"


def _count_forward(module: Any, args: Any) -> None:
    CALLS["forward"] += 1


def _linear(name: str, config: ModelConfig, layer_idx: int) -> Any:
    """A per-token linear map (B, T, D) -> (B, T, D): causal, no state."""
    from torch import nn

    CALLS["built"].append([name, config.d_model, config.n_head, layer_idx])
    mixer = nn.Linear(config.d_model, config.d_model, bias=config.bias)
    mixer.register_forward_pre_hook(_count_forward)
    return mixer


def build_plain(config: ModelConfig, layer_idx: int) -> Any:
    return _linear("plain", config, layer_idx)


def build_halves(config: ModelConfig, layer_idx: int) -> Any:
    if config.head_dim % 2:
        raise ValueError(f"head_dim {config.head_dim} is odd; {WHY_EVEN}")
    return _linear("halves", config, layer_idx)


def build_declared(config: ModelConfig, layer_idx: int) -> Any:
    return _linear("declared", config, layer_idx)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(Variant(name="plain", build_mixer=build_plain, description="builds at any size"))
    register(Variant(name="halves", build_mixer=build_halves, description="refuses an odd head_dim when built"))
    register(
        Variant(
            name="declared",
            build_mixer=build_declared,
            description="declares an even head_dim",
            constraints=(ShapeConstraint.multiple_of("head_dim", 2, WHY_EVEN),),
        )
    )
