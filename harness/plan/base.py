"""The building blocks every experiment kind's schema shares: budgets, training settings,
model sizes, the common experiment fields and grids (the comparison protocol: plan/protocol.py)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Budget(BaseModel):
    """How much training each cell gets; exactly one key. The same budget object applies
    to every variant of an experiment; what each actually consumed is recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    steps: int | None = Field(default=None, gt=0)
    """Optimizer steps each cell trains."""
    tokens: int | None = Field(default=None, gt=0)
    """Training tokens each cell consumes (batch_size x seq_len per step)."""
    seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Wall-clock training time in seconds (evaluation excluded); the steps it allows depend on the machine."""
    flops: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Training FLOPs, counted from each variant's analytic FLOPs per token (forward and backward)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Budget:
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of steps, tokens, seconds, flops (got {given or 'none'})")
        return self

    def kind(self) -> str:
        return next(k for k, v in self.model_dump().items() if v is not None)


class TrainSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    budget: Budget
    """How much each cell trains: exactly one of steps, tokens, seconds, flops (see Budget)."""
    batch_size: int = Field(default=8, gt=0)
    """Sequences per optimizer step (the global batch under torchrun, split across its processes)."""
    seq_len: int = Field(default=128, gt=0)
    """Training sequence length T in tokens; also the model's context unless models[].context sets one."""
    lr: float = Field(default=1e-3, gt=0)
    """Peak learning rate of AdamW, reached after warm-up; the grid or protocol.tuning may search it."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """Where the cosine decay ends, as a fraction of lr (0.1: the last step trains at lr / 10)."""
    warmup_steps: int = Field(default=20, ge=0)
    """Steps of linear warm-up from 0 to lr before the cosine decay."""
    weight_decay: float = Field(default=0.1, ge=0)
    """AdamW weight decay, applied to weight matrices only (not to biases, norms or gains); 0 = none."""
    beta1: float = Field(default=0.9, ge=0, lt=1)
    """AdamW's first-moment decay (beta1)."""
    beta2: float = Field(default=0.95, ge=0, lt=1)
    """AdamW's second-moment decay (beta2)."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Largest global gradient norm; gradients above it are scaled down to it before each step."""
    eval_interval: int = Field(default=50, gt=0)
    """Steps between validation evaluations (one more is made at the end of training)."""
    eval_tokens: int = Field(default=16384, gt=0)
    """Held-out tokens read by each validation evaluation."""
    log_interval: int = Field(default=10, gt=0)
    """Steps between points of the recorded training-loss curve."""
    model_kind: Literal["backbone", "own"] = "backbone"
    """backbone: the shared backbone around the variant's mixer (the default comparison, only the mixer differs); own:
    the variant's own reference model."""
    checkpoint: bool = True
    """Keep the final model in the store's checkpoints/ folder (lm-eval, fine-tuning and inspection read it)."""
    checkpoint_interval: int = Field(default=100, ge=0)
    """Steps between resumable training states, so an interrupted cell resumes where it stopped; 0 = off."""
    diverge_factor: float = Field(default=3.0, gt=1)
    """A training loss above diverge_factor x ln(vocab size) stops the cell as diverged (recorded as a result, not a
    crash)."""
    compile: bool = False
    """torch.compile the model for training (opt-in; recorded with the result, and part of the cell's key)."""
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    """Training precision on a CPU: fp32, bf16 autocast, or auto (a probe run per cell decides between them)."""
    eval_lengths: list[int] | None = None
    """After training, evaluate at these sequence lengths too (e.g. [T, 2T, 4T, 8T]): loss per position bucket on text,
    accuracy per length on tasks; a length the model cannot run is recorded as such. None: the training length only."""

    @field_validator("eval_lengths", mode="before")
    @classmethod
    def _lengths(cls, lengths: Any) -> Any:
        if lengths is None:
            return None
        if not lengths:
            raise ValueError("eval_lengths is empty; give lengths such as [128, 256, 512, 1024] or leave it out")
        bad = [n for n in lengths if isinstance(n, bool) or not isinstance(n, int) or n < 2]
        if bad:
            raise ValueError(f"eval_lengths must be integers >= 2 (sequence lengths in tokens), got {bad}")
        if len(set(lengths)) != len(lengths):
            raise ValueError(f"eval_lengths lists a length twice: {lengths}; give each once")
        return lengths


class LayerEntry(BaseModel):
    """One layer of a hybrid: a registered variant and its own options."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    variant: str = Field(min_length=1)
    """A registered variant name (`attnbench list`): the mixer of this layer."""
    options: dict[str, Any] = {}
    """That variant's options for this layer, as variant_options would give them; {}: its defaults."""


class LayerPattern(BaseModel):
    """Layers of a hybrid as a pattern repeated to n_layer (n_layer a multiple of its length)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    pattern: list[str | LayerEntry] = Field(min_length=2)
    """At least two layers, in order: variant names or {variant, options} entries; repeated until n_layer layers."""


def _entry(item: str | LayerEntry) -> tuple[str, dict[str, Any]]:
    return (item, {}) if isinstance(item, str) else (item.variant, dict(item.options))


class ModelSpec(BaseModel):
    """Model size; `context` defaults to the training sequence length. With ``layers`` the
    model is a hybrid: each layer's mixer is the variant its entry names."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    d_model: int = Field(default=64, gt=0)
    """Model width: the residual stream's size (a multiple of n_head)."""
    n_layer: int = Field(default=2, gt=0)
    """Number of layers (blocks); with a per-layer `layers` list it defaults to that list's length."""
    n_head: int = Field(default=2, gt=0)
    """Attention heads per layer; each head has d_model / n_head dimensions."""
    context: int | None = Field(default=None, gt=0)
    """Longest sequence the model takes, in tokens (learned positions are made for it); None: the experiment's own
    length (train.seq_len, or the longest length a speed sweep times)."""
    mlp_ratio: int = Field(default=4, gt=0)
    """Hidden width of each block's MLP as a multiple of d_model (match_params may set another width)."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout probability in the backbone (0: none)."""
    bias: bool = True
    """Biases in the linear layers and norms."""
    activation: Literal["gelu", "gelu_tanh"] = "gelu"
    """The backbone MLP's activation: gelu, or gelu_tanh (the tanh approximation, HF GPT-2's gelu_new)."""
    positions: Literal["learned", "none"] = "learned"
    """Backbone positions: learned absolute embeddings (cannot run past `context`), or none (NoPE: order comes from the
    causal mixer alone, which lets eval_lengths go past the trained length)."""
    mlp: bool = True
    """false: mixer-only blocks (no MLP, no second norm), as Zoology's recall models use; a 2-layer softmax model forms
    its recall circuit several times sooner without the MLP."""
    layers: LayerPattern | list[str | LayerEntry] | None = None
    """A hybrid: {pattern: [...]} repeated to n_layer, or one entry per layer (a variant name or {variant, options});
    this model then runs the hybrid instead of the experiment's variants. None: every layer runs the variant."""
    match_params: str | None = None
    """A variant name: every other variant's MLP width is set so its parameter count matches that variant's at this
    size (within params_within). None: every variant keeps mlp_ratio."""
    params_within: float = Field(default=0.02, gt=0, lt=1)
    """Relative tolerance of match_params (0.02: parameter counts within 2% of the reference's)."""

    @model_validator(mode="before")
    @classmethod
    def _n_layer_from_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("layers"), list) and "n_layer" not in data:
            data = {**data, "n_layer": len(data["layers"])}  # a per-layer list says how many
        return data

    @model_validator(mode="after")
    def _match_needs_mlp(self) -> ModelSpec:
        if self.match_params is not None and not self.mlp:
            raise ValueError(
                f"match_params: {self.match_params} matches parameters by setting each variant's MLP width, "
                "and mlp: false leaves no MLP; remove match_params or set mlp: true"
            )
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelSpec:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        return self

    @model_validator(mode="after")
    def _layers_fit(self) -> ModelSpec:
        if isinstance(self.layers, list) and len(self.layers) != self.n_layer:
            raise ValueError(
                f"layers lists {len(self.layers)} layers and n_layer is {self.n_layer}; make them "
                "agree (leave n_layer out to take the list's length), or write {pattern: [...]}"
            )
        if isinstance(self.layers, LayerPattern) and self.n_layer % len(self.layers.pattern):
            raise ValueError(
                f"layers.pattern has {len(self.layers.pattern)} layers, which do not repeat to "
                f"n_layer {self.n_layer}; make n_layer a multiple of {len(self.layers.pattern)}"
            )
        return self

    def layer_entries(self) -> list[tuple[str, dict[str, Any]]] | None:
        """(variant, options) per layer of one period of the hybrid; None for a plain model."""
        if self.layers is None:
            return None
        items = self.layers.pattern if isinstance(self.layers, LayerPattern) else self.layers
        return [_entry(item) for item in items]


SpecT = TypeVar("SpecT", bound=BaseModel)


def spec_as(spec: BaseModel, cls: type[SpecT], owner: str) -> SpecT:
    """``spec`` as the kind's own mapping type: each kind's code reads only its own kind's mapping."""
    if not isinstance(spec, cls):
        raise TypeError(f"{owner}: expected a {cls.__name__} mapping, got a {type(spec).__name__}")
    return spec


class ExperimentBase(BaseModel):
    """Fields every experiment kind has: which variants, at which sizes, which seeds."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    name: str = Field(min_length=1)
    """The experiment's name, unique within the suite: results and reports are grouped by it, and `--set
    experiments.NAME.KEY=...` and `--experiments` address it."""
    variants: list[str] | Literal["all"] = "all"
    """Registered variant names (`attnbench list`) to run, or all (every registered variant)."""
    variant_options: dict[str, dict[str, Any]] = {}
    """Per variant, its own options, checked against the variant's options: {NAME: {option: value}}; a variant not
    named takes its defaults."""
    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec()], min_length=1)
    """Model sizes; every variant runs at each (a size that lists `layers` runs its hybrid instead)."""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """Seeds; each (variant, model, grid point) trains once per seed, and every variant sees the same batches under the
    same seed."""

    def spec(self) -> BaseModel:
        """The kind-specific mapping (e.g. ``train:`` of a train experiment)."""
        raise NotImplementedError

    def points(self) -> list[dict[str, Any]]:
        """Hyper-parameter points; kinds without a grid have one empty point."""
        return [{}]

    def context(self, spec: BaseModel) -> int:
        """Model context when a model spec leaves it unset."""
        raise NotImplementedError


OPTION_PREFIX = "variant_options."  # grid keys variant_options.<variant>.<option> sweep a variant's own knob


def option_key(key: str) -> tuple[str, str] | None:
    """(variant, option) of a grid key ``variant_options.<variant>.<option>``; None for a train setting."""
    if not key.startswith(OPTION_PREFIX):
        return None
    variant, _, option = key[len(OPTION_PREFIX) :].partition(".")
    return variant, option


def variant_point(point: dict[str, Any], variant: str) -> dict[str, Any]:
    """The part of a grid point that applies to ``variant``: train settings and its own options."""
    return {k: v for k, v in point.items() if (opt := option_key(k)) is None or opt[0] == variant}


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of a grid, in key order; [{}] for an empty grid."""
    points: list[dict[str, Any]] = [{}]
    for key, values in grid.items():
        points = [{**p, key: v} for p in points for v in values]
    return points
