"""The variant contract: what a plugin registers for one attention mechanism.

A plugin calls ``register(Variant(...))`` once per mechanism from its
``attnbench_register_variants`` hook. The harness validates each registration.

Mixer contract (what ``build_mixer(config, layer_idx)`` returns, an ``nn.Module``):

* ``forward(x)``: x (B, T, D) -> y (B, T, D), causal: y[:, t] depends on x[:, :t+1] only.
  In training mode a mixer that adds an auxiliary objective returns
  ``MixerOutput(y, aux=(AuxLoss(...), ...))`` instead of a bare tensor.
  Must run on CPU in fp32 and on CUDA under autocast; no device or dtype is hard-coded.
* ``init_state(batch_size, max_len, device, dtype) -> state`` and
  ``step(x, state) -> (y, new_state)`` when ``decode != "none"``: x (B, t, D) holds the
  next t >= 1 positions; the state is an explicit value (a dataclass, tuple or dict of
  tensors), never kept on the module; ``step`` must not modify the tensors of the state
  it was given, except preallocated KV-cache slots beyond that state's own length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, runtime_checkable

from attnbench.contract.config import ModelConfig
from attnbench.contract.constraints import ShapeConstraint
from attnbench.contract.option_types import type_problem
from attnbench.contract.reference import Reference
from attnbench.errors import quoted, shortened

if TYPE_CHECKING:  # torch for the checker only: a plugin registers (and a suite validates) without it
    import torch
    from torch import nn

DecodeKind = Literal["kv_cache", "recurrent", "window", "none"]
DECODE_KINDS: tuple[str, ...] = ("kv_cache", "recurrent", "window", "none")


class OwnModel(Protocol):
    """What ``build_model`` returns: an ``attnbench.LanguageModel`` subclass, named here by the
    part the contract relies on (``attnbench.nn`` builds on the contract, not the other way);
    the harness checks the class when it builds one."""

    config: ModelConfig

    def num_params(self) -> int: ...


MixerBuilder = Callable[[ModelConfig, int], "nn.Module"]
ModelBuilder = Callable[[ModelConfig], OwnModel]
# (config, layer_idx, T) -> number of state elements one sequence holds after T tokens.
StateSize = Callable[[ModelConfig, int, int], int]
# (config, layer_idx, T) -> forward FLOPs per token of this layer's mixer, averaged over
# a sequence of length T (multiply-add = 2 FLOPs; projections included).
FlopsPerToken = Callable[[ModelConfig, int, int], float]
# (mixer, x (B, T, D) the mixer's input) -> what each head attends to, no gradient:
# pairwise weights (B, H, T, T), row i over keys j <= i, or per-token importances (B, H, T).
# The mixer is one this variant's build_mixer made (its own class: Any here).
AttentionMaps = Callable[[Any, "torch.Tensor"], "torch.Tensor"]


@runtime_checkable
class DecodingMixer(Protocol):
    """A mixer's optional incremental form (``init_state``/``step``, see the mixer contract)."""

    def init_state(
        self, batch_size: int, max_len: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> Any: ...

    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]: ...


def decoding(mixer: nn.Module) -> DecodingMixer:
    """``mixer`` as its incremental form; NotImplementedError (as a model without one) if it has none."""
    if not isinstance(mixer, DecodingMixer):
        raise NotImplementedError(f"{type(mixer).__name__} has no incremental decoding (init_state and step)")
    return mixer


class AuxLoss(NamedTuple):
    """An auxiliary training objective reported by one layer's mixer.

    The model averages ``value`` over the layers reporting the same ``name`` and adds
    ``weight * mean`` to the cross-entropy; the unweighted mean is recorded as a metric.
    """

    name: str
    value: torch.Tensor  # () scalar
    weight: float


class MixerOutput(NamedTuple):
    """What a mixer with an auxiliary objective returns from ``forward`` in training."""

    y: torch.Tensor  # (B, T, D)
    aux: tuple[AuxLoss, ...] = ()


@dataclass(frozen=True)
class Variant:
    """One registered attention mechanism.

    name: unique id used in suites and the CLI (lower-case, ``[a-z0-9_-]``).
    build_mixer: ``(config, layer_idx) -> nn.Module`` following the mixer contract, or a
        ``"package.module:object"`` string naming it, imported on first use (so the
        registration module needs no torch); ``build_model`` and ``attention_maps`` likewise.
    description: one line shown by ``attnbench list``.
    options: a dataclass type holding the variant's own knobs; suites pass
        ``variant_options`` that are validated into it and put on ``config.options``.
    build_model: optional ``(config) -> LanguageModel`` for the variant's own
        reference architecture (see ``attnbench.nn.model.LanguageModel``).
    decode: kind of incremental decoding the mixer supports (a ``DecodeKind``; a hybrid's
        joins its parts' kinds with "+", e.g. "kv_cache+recurrent").
    state_size: recurrent/cache state elements per sequence per layer after T tokens.
    flops_per_token: analytic forward FLOPs per token per layer at context T.
    causal: True when outputs at t never depend on inputs after t.
    aux_loss: True when the mixer adds an auxiliary training objective.
    attention_maps: optional ``(mixer, x) -> weights`` for ``attnbench inspect``: pairwise
        (B, H, T, T) or per-token importances (B, H, T) of one layer's mixer on its input x.
    constraints: shapes the builders need (``ShapeConstraint``, e.g. head_dim even); validate
        states them and refuses a suite's model size that breaks one.
    version: the plugin's version of this variant (part of every content key).
    """

    name: str
    build_mixer: Reference[MixerBuilder] = Reference()
    description: str = ""
    options: type | None = None
    build_model: Reference[ModelBuilder | None] = Reference(default=None)
    decode: DecodeKind | str = "none"  # str: a hybrid's joined kinds
    state_size: StateSize | None = None
    flops_per_token: FlopsPerToken | None = None
    causal: bool = True
    aux_loss: bool = False
    version: str = "0"
    attention_maps: Reference[AttentionMaps | None] = Reference(default=None)
    constraints: tuple[ShapeConstraint, ...] = ()
    # Filled by the plugin manager, not by plugins.
    plugin: str = field(default="", compare=False)
    distribution: str = field(default="", compare=False)
    source_files: tuple[str, ...] = field(default=(), compare=False)

    def capabilities(self) -> dict[str, Any]:
        return {
            "causal": self.causal,
            "decode": self.decode,
            "aux_loss": self.aux_loss,
            "own_model": self.build_model is not None,
        }

    def make_options(self, raw: dict[str, Any] | None) -> Any:
        """Validate a suite's ``variant_options`` mapping into the options dataclass.

        Raises ValueError naming the unknown or ill-typed key and the accepted ones.
        """
        raw = dict(raw or {})
        if self.options is None:
            if raw:
                raise ValueError(
                    f"variant {self.name!r} takes no options, got {quoted(sorted(raw))}; remove 'variant_options'"
                )
            return None
        known = {f.name: f for f in dataclasses.fields(self.options)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(
                f"unknown option(s) {quoted(unknown)} for variant {self.name!r}; accepted: {sorted(known)}"
            )
        try:
            return self.options(**raw)
        except (TypeError, ValueError) as exc:  # a TypeError names no option ("'<' not supported ..."): name it
            why = (isinstance(exc, TypeError) and type_problem(self.options, raw)) or shortened(str(exc))
            raise ValueError(f"invalid options for variant {self.name!r}: {why}") from exc


def state_tensors(state: Any) -> list[torch.Tensor]:
    """All tensors held by a decode state (dataclass, tuple, list or dict, nested)."""
    import torch  # a state holds tensors: torch is loaded already

    if state is None:
        return []
    if isinstance(state, torch.Tensor):
        return [state]
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return [t for f in dataclasses.fields(state) for t in state_tensors(getattr(state, f.name))]
    if isinstance(state, dict):
        return [t for v in state.values() for t in state_tensors(v)]
    if isinstance(state, (tuple, list)):
        return [t for v in state for t in state_tensors(v)]
    return []


def state_numel(state: Any) -> int:
    """Number of elements held by a decode state's tensors."""
    return sum(t.numel() for t in state_tensors(state))
