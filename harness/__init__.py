"""attnbench: a fair, plugin-based benchmark harness for attention in causal LMs.

Public API for plugin authors::

    from harness import hookimpl, Variant, ModelConfig, MixerOutput, AuxLoss, mark_residual,
                         split_heads, merge_heads
"""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("attnbench")

from .backbone import Backbone, mark_residual, merge_heads, split_heads  # noqa: E402
from .config import ModelConfig  # noqa: E402
from .model import LanguageModel, ModelOutput  # noqa: E402
from .variant import AuxLoss, MixerOutput, Variant  # noqa: E402

__all__ = [
    "AuxLoss", "Backbone", "LanguageModel", "MixerOutput", "ModelConfig", "ModelOutput",
    "Variant", "__version__", "hookimpl", "mark_residual", "merge_heads", "split_heads",
]
