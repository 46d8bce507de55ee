"""An exported attnbench model behind transformers' ``PreTrainedModel`` and ``GenerationMixin``.

The network itself is built by attnbench from the variant's installed plugin (exactly the
model ``attnbench`` trains and evaluates); this class only adapts its interface:

* ``forward(input_ids)`` returns the attnbench model's logits (B, T, V);
* generation carries the variant's own incremental state (KV cache or recurrent state)
  as ``past_key_values``: the prompt is consumed in one ``step``, then one token per step,
  as ``attnbench.nn.generate`` does. Variants without incremental decoding re-run the
  whole prefix each step, with a warning (never silently).
"""

from __future__ import annotations

import importlib.metadata as md
import logging
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_attnbench import AttnbenchConfig

if TYPE_CHECKING:  # imported when the model is built: this file travels with the exported folder
    from attnbench.nn.model import LanguageModel

    # The two bases are Any to the type checker: checking a subclass of them makes Pyright bind
    # transformers' whole lazy __init__ (about a third of CI's type check); the export tests run them.
    GenerationMixin = PreTrainedModel = Any
else:
    from transformers.generation.utils import GenerationMixin
    from transformers.modeling_utils import PreTrainedModel

log = logging.getLogger(__name__)


class AttnbenchDecodeState:
    """The variant's decode state and the number of positions it has consumed. Duck-types
    the parts of a transformers ``Cache`` that ``generate`` reads (``get_seq_length``)."""

    is_compileable = False

    def __init__(self, state: Any, seen: int) -> None:
        self.state, self.seen = state, seen

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen


def _plugin_missing(config: AttnbenchConfig, why: str) -> ImportError:
    dist = config.plugin_distribution or "(unknown distribution)"
    try:
        installed = f"{dist} {md.version(dist)} is installed but does not register it"
    except (md.PackageNotFoundError, ValueError):
        installed = f"{dist} is not installed"
    return ImportError(
        f"this model is attnbench variant {config.variant!r}, registered by the plugin distribution "
        f"{dist!r}; {installed} ({why}). Install the plugin that trained it: pip install {dist}"
    )


def build_attnbench_model(config: AttnbenchConfig) -> tuple[LanguageModel, bool]:
    """The attnbench model of ``config.variant``, built by its installed plugin, and whether
    the variant decodes incrementally."""
    try:
        from attnbench.errors import AttnbenchError
        from attnbench.nn.checkpoint import build_model
        from attnbench.registry.loader import load_registry
    except ImportError as exc:
        raise ImportError(f"this model needs the attnbench package: pip install attnbench ({exc})") from exc
    try:
        variant = load_registry().get(config.variant)
    except AttnbenchError as exc:
        raise _plugin_missing(config, str(exc)) from None
    where = f"exported model of variant {config.variant!r}"
    return build_model(variant, config.model_kind, config.attnbench_config, where), variant.decode != "none"


def _refuse_left_padding(attention_mask: torch.Tensor | None) -> None:
    """attnbench models take no attention mask: right padding is harmless (causal), left is not."""
    if attention_mask is None or bool(attention_mask.all()):
        return
    if bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any()):  # a 0 before a 1: left padding
        raise ValueError(
            "attnbench models take no attention mask: pass unpadded or right-padded "
            "input_ids (generate one prompt at a time, or prompts of equal length)"
        )


class AttnbenchForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = AttnbenchConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []

    def __init__(self, config: AttnbenchConfig) -> None:
        super().__init__(config)
        self.model, self.incremental = build_attnbench_model(config)
        self._warned_no_step = False
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the state is the variant's own (see AttnbenchDecodeState), not a DynamicCache

    def _init_weights(self, module: torch.nn.Module) -> None:
        pass  # attnbench's builders initialise; from_pretrained then loads every weight

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: AttnbenchDecodeState | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """input_ids (B, T) -> logits (B, T, V); ``use_cache=True`` (as ``generate`` passes)
        returns the variant's decode state in ``past_key_values``."""
        _refuse_left_padding(attention_mask)
        seen = past_key_values.seen if past_key_values is not None else 0
        context = self.config.max_position_embeddings
        if seen + input_ids.size(1) > context:
            raise ValueError(f"{seen + input_ids.size(1)} positions exceed the model context {context}")
        past = None
        if use_cache and self.incremental:
            state = (
                past_key_values.state
                if past_key_values is not None
                else self.model.init_state(input_ids.size(0), context, device=input_ids.device)
            )
            logits, state = self.model.step(input_ids, state)  # (B, T, V)
            past = AttnbenchDecodeState(state, seen + input_ids.size(1))
        else:
            if use_cache and not self._warned_no_step:
                log.warning(
                    "variant %r has no incremental decoding: generate re-runs the whole prefix for every new token",
                    self.config.variant,
                )
                self._warned_no_step = True
            logits = self.model(input_ids).logits  # (B, T, V)
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.size(-1)),  # () fp32 log-softmax
                labels[:, 1:].reshape(-1),
                ignore_index=-100,
            )
        # transformers annotates past_key_values as its Cache; generate() carries any object, here the variant's state.
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=past)  # pyright: ignore[reportArgumentType]

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.Tensor,
        past_key_values: AttnbenchDecodeState | None = None,
        attention_mask: torch.Tensor | None = None,
        use_cache: bool | None = True,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Only the positions the state has not consumed yet (all of them without a state)."""
        if past_key_values is not None:
            input_ids = input_ids[:, past_key_values.seen :]  # (B, new)
        return {
            "input_ids": input_ids,
            "past_key_values": past_key_values,
            "attention_mask": attention_mask,
            "use_cache": use_cache,
        }
