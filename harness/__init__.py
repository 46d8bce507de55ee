"""attnbench: a fair, plugin-based benchmark harness for attention in causal LMs.

``__all__`` is the plugin API: everything a plugin needs, and nothing a plugin must not
rely on. Built-in plugins (``attnbench.plugins``) import only these names and torch.
The names load on first use (PEP 562), so ``attnbench --help`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.lazy import lazy_getattr

__version__ = "0.2.0"

if TYPE_CHECKING:
    from attnbench.contract.config import ModelConfig
    from attnbench.contract.constraints import ShapeConstraint
    from attnbench.contract.hookspecs import hookimpl
    from attnbench.contract.task import IGNORE, Task, TaskBatch, TaskEval
    from attnbench.contract.variant import AuxLoss, MixerOutput, Variant
    from attnbench.data.heldout import RecallOptions, recall_line, recall_training_tensors
    from attnbench.data.needle import NEEDLE_DEFAULTS, NEEDLE_KINDS, layout_chars, needle_example
    from attnbench.errors import AttnbenchError, PluginError
    from attnbench.kernels import (
        LinearState,
        LogState,
        chunked_flops_per_token,
        linear_attention,
        linear_init_state,
        log_attention,
        log_init_state,
    )
    from attnbench.nn.backbone import Backbone, embed_with_positions, mark_residual, merge_heads, split_heads
    from attnbench.nn.model import LanguageModel, ModelOutput, lm_loss
    from attnbench.registry.loader import Registry, get_plugin_manager, load_registry

# public name -> the module that defines it
_HOMES: dict[str, str] = {
    "ModelConfig": "attnbench.contract.config",
    "ShapeConstraint": "attnbench.contract.constraints",
    "hookimpl": "attnbench.contract.hookspecs",
    **dict.fromkeys(("IGNORE", "Task", "TaskBatch", "TaskEval"), "attnbench.contract.task"),
    **dict.fromkeys(("AuxLoss", "MixerOutput", "Variant"), "attnbench.contract.variant"),
    **dict.fromkeys(("RecallOptions", "recall_line", "recall_training_tensors"), "attnbench.data.heldout"),
    **dict.fromkeys(("NEEDLE_DEFAULTS", "NEEDLE_KINDS", "layout_chars", "needle_example"), "attnbench.data.needle"),
    **dict.fromkeys(("AttnbenchError", "PluginError"), "attnbench.errors"),
    **dict.fromkeys(
        (
            "LinearState",
            "LogState",
            "chunked_flops_per_token",
            "linear_attention",
            "linear_init_state",
            "log_attention",
            "log_init_state",
        ),
        "attnbench.kernels",
    ),
    **dict.fromkeys(
        ("Backbone", "embed_with_positions", "mark_residual", "merge_heads", "split_heads"), "attnbench.nn.backbone"
    ),
    **dict.fromkeys(("LanguageModel", "ModelOutput", "lm_loss"), "attnbench.nn.model"),
    **dict.fromkeys(("Registry", "get_plugin_manager", "load_registry"), "attnbench.registry.loader"),
}


__getattr__ = lazy_getattr(__name__, _HOMES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    # the contract: what a plugin implements
    "hookimpl",
    "Variant",
    "MixerOutput",
    "AuxLoss",
    "ModelConfig",
    "ShapeConstraint",
    "Task",
    "TaskBatch",
    "TaskEval",
    "IGNORE",
    # the shared model around any mixer
    "Backbone",
    "LanguageModel",
    "ModelOutput",
    "lm_loss",
    "embed_with_positions",
    "mark_residual",
    "split_heads",
    "merge_heads",
    # the chunked scans the built-in linear, Heinsen and Based mixers use (one code path for
    # training and for step)
    "linear_attention",
    "linear_init_state",
    "LinearState",
    "log_attention",
    "log_init_state",
    "LogState",
    "chunked_flops_per_token",
    # the text format of the recall task shared with the lm-eval recall task
    "RecallOptions",
    "recall_line",
    "recall_training_tensors",
    # needle-in-a-haystack text, shared with the lm-eval needle tasks
    "NEEDLE_KINDS",
    "NEEDLE_DEFAULTS",
    "layout_chars",
    "needle_example",
    # errors a plugin may raise, and the registry loader
    "AttnbenchError",
    "PluginError",
    "Registry",
    "get_plugin_manager",
    "load_registry",
    "__version__",
]
