"""attnbench: a fair, plugin-based benchmark harness for attention in causal LMs.

``__all__`` is the plugin API: everything a plugin needs, and nothing a plugin must not
rely on. Built-in plugins (``attnbench.plugins``) import only these names and torch.
"""

from __future__ import annotations

__version__ = "0.2.0"

from attnbench.contract.config import ModelConfig  # noqa: E402
from attnbench.contract.hookspecs import hookimpl  # noqa: E402
from attnbench.contract.task import IGNORE, Task, TaskBatch, TaskEval  # noqa: E402
from attnbench.contract.variant import AuxLoss, MixerOutput, Variant  # noqa: E402
from attnbench.data.heldout import RecallOptions, recall_line, recall_training_tensors  # noqa: E402
from attnbench.data.needle import NEEDLE_DEFAULTS, NEEDLE_KINDS, layout_chars, needle_example  # noqa: E402
from attnbench.errors import AttnbenchError, PluginError  # noqa: E402
from attnbench.kernels import (  # noqa: E402
    LinearState,
    LogState,
    chunked_flops_per_token,
    linear_attention,
    linear_init_state,
    log_attention,
    log_init_state,
)
from attnbench.nn.backbone import Backbone, embed_with_positions, mark_residual, merge_heads, split_heads  # noqa: E402
from attnbench.nn.model import LanguageModel, ModelOutput, lm_loss  # noqa: E402
from attnbench.registry.loader import Registry, get_plugin_manager, load_registry  # noqa: E402

__all__ = [
    # the contract: what a plugin implements
    "hookimpl",
    "Variant",
    "MixerOutput",
    "AuxLoss",
    "ModelConfig",
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
