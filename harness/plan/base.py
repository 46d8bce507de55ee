"""The building blocks every experiment kind's schema shares: budgets, training settings,
model sizes, the common experiment fields, the comparison protocol and grids."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator


class Budget(BaseModel):
    """How much training each cell gets; exactly one key. The same budget object applies
    to every variant of an experiment; what each actually consumed is recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: int | None = Field(default=None, gt=0)  # optimizer steps
    tokens: int | None = Field(default=None, gt=0)  # training tokens (batch x seq_len per step)
    # wall-clock training time (evaluation excluded)
    seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # training FLOPs, from the analytic FLOPs per token
    flops: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _exactly_one(self) -> Budget:
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of steps, tokens, seconds, flops (got {given or 'none'})")
        return self

    def kind(self) -> str:
        return next(k for k, v in self.model_dump().items() if v is not None)


class TrainSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    budget: Budget
    batch_size: int = Field(default=8, gt=0)
    seq_len: int = Field(default=128, gt=0)
    lr: float = Field(default=1e-3, gt=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    warmup_steps: int = Field(default=20, ge=0)
    weight_decay: float = Field(default=0.1, ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    grad_clip: float = Field(default=1.0, gt=0)
    eval_interval: int = Field(default=50, gt=0)
    eval_tokens: int = Field(default=16384, gt=0)
    log_interval: int = Field(default=10, gt=0)
    model_kind: Literal["backbone", "own"] = "backbone"
    checkpoint: bool = True  # keep the final model (for lm-eval and inspection)
    checkpoint_interval: int = Field(default=100, ge=0)  # steps between resumable training states; 0 = off
    diverge_factor: float = Field(default=3.0, gt=1)  # loss above factor * ln(vocab) counts as diverged
    compile: bool = False  # torch.compile the model for training (opt-in; recorded with the result)
    precision: Literal["fp32", "bf16", "auto"] = "fp32"  # CPU training: bf16 autocast, or auto (a probe decides)
    # After training, evaluate at these sequence lengths too (e.g. [T, 2T, 4T, 8T]): loss per
    # position bucket on text, accuracy per length on tasks; a length the model cannot run is recorded.
    eval_lengths: list[int] | None = None

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

    model_config = ConfigDict(extra="forbid", frozen=True)
    variant: str = Field(min_length=1)  # a registered variant name (`attnbench list`)
    options: dict[str, Any] = {}  # that variant's options, as variant_options would give them


class LayerPattern(BaseModel):
    """Layers of a hybrid as a pattern repeated to n_layer (n_layer a multiple of its length)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: list[str | LayerEntry] = Field(min_length=2)  # variant names or {variant, options}, in layer order


def _entry(item: str | LayerEntry) -> tuple[str, dict[str, Any]]:
    return (item, {}) if isinstance(item, str) else (item.variant, dict(item.options))


class ModelSpec(BaseModel):
    """Model size; `context` defaults to the training sequence length. With ``layers`` the
    model is a hybrid: each layer's mixer is the variant its entry names."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    d_model: int = Field(default=64, gt=0)
    n_layer: int = Field(default=2, gt=0)
    n_head: int = Field(default=2, gt=0)
    context: int | None = Field(default=None, gt=0)
    mlp_ratio: int = Field(default=4, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    bias: bool = True
    activation: Literal["gelu", "gelu_tanh"] = "gelu"  # backbone MLP; gelu_tanh = HF GPT-2's gelu_new
    # Backbone positions: learned absolute embeddings (cannot run past `context`), or none
    # (NoPE: order comes from the causal mixer alone; lets eval_lengths go past the trained length).
    positions: Literal["learned", "none"] = "learned"
    # false: mixer-only blocks (no MLP, no second norm), as Zoology's recall models (state_mixer
    # Identity); 2-layer softmax forms its recall circuit several times sooner without the MLP.
    mlp: bool = True
    # A hybrid: {pattern: [...]} repeated to n_layer, or one entry per layer (a variant name or
    # {variant, options}); this model then runs the hybrid instead of the experiment's variants.
    layers: LayerPattern | list[str | LayerEntry] | None = None
    match_params: str | None = None  # a variant: every other's MLP width is set so its parameters match that one's
    params_within: float = Field(default=0.02, gt=0, lt=1)  # relative tolerance of match_params

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

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    variants: list[str] | Literal["all"] = "all"
    variant_options: dict[str, dict[str, Any]] = {}
    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec()], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)

    def spec(self) -> BaseModel:
        """The kind-specific mapping (e.g. ``train:`` of a train experiment)."""
        raise NotImplementedError

    def points(self) -> list[dict[str, Any]]:
        """Hyper-parameter points; kinds without a grid have one empty point."""
        return [{}]

    def context(self, spec: BaseModel) -> int:
        """Model context when a model spec leaves it unset."""
        raise NotImplementedError


class Tuning(BaseModel):
    """Successive halving over the grid before the reported runs: every grid point trains on
    ``seeds`` at ``budget``; the best 1/``eta`` of the points (mean validation loss) go on at
    ``eta`` x that budget, and so on while more than one point is left and the next budget
    stays below the experiment's; the survivor is then trained at the experiment's budget on
    every seed. Every tuning run stays in the store; the choice reads validation data only
    (``criterion``: loss, or a task's accuracy on answers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)  # seeds of the tuning runs
    budget: Budget  # the first rung's budget (same kind as the experiment's, and smaller)
    eta: int = Field(default=3, ge=2)  # keep the best 1/eta of the points per rung; budget grows eta-fold
    # what ranks the points: loss (validation loss, lowest first) or accuracy (a task's validation
    # answers, highest first, ties by loss); a search window's extension reads it too
    criterion: Literal["loss", "accuracy"] = "loss"


class SeedRounds(BaseModel):
    """Seeds until decided: every variant runs seeds 0..``min``-1; then each row still
    undetermined against the baseline gets the next seed (and the baseline with it, for
    pairing), round by round, until it is decided or has ``max``. Decided rows stop. Decisions
    read a group-sequential paired t design with Lan-DeMets ``spending``, valid under this
    optional stopping."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min: int = Field(default=3, ge=2)  # seeds of the first round (every variant)
    max: int = Field(default=10, le=50)  # seeds a row may reach
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"  # alpha-spending function (Lan-DeMets type)

    @model_validator(mode="after")
    def _ordered(self) -> SeedRounds:
        if self.max < self.min:
            raise ValueError(f"seeds.max ({self.max}) is below seeds.min ({self.min}); give max >= min")
        return self


class Expectation(BaseModel):
    """A published finding the run can test: ``variant`` against ``versus`` on the protocol's
    metric (at one evaluation setting, or the headline test metric), with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    claim: str = Field(min_length=1)  # the finding in words
    source: str = Field(min_length=1)  # where it is published (paper, figure or table)
    variant: str = Field(min_length=1)
    versus: str | None = None  # default: the protocol's baseline
    outcome: Literal["better", "worse", "equivalent"]  # what the source expects of variant vs versus
    setting: dict[str, Any] | None = None  # an eval setting's options (e.g. {n_pairs: 16}); None: all test sets
    # a claim about a trend along one setting axis (e.g. num_kv_pairs: "recall falls as pairs grow"):
    # ``setting`` is its hardest point; the claim is tested only where the variant learned at the
    # easiest setting of the axis (the experiment's other extreme), else "not testable"
    # (checked against the experiment's data.eval_settings, which name the settings a fix may use)
    trend: str | None = Field(default=None, min_length=1)


class Protocol(BaseModel):
    """The fair-comparison protocol of a train experiment: each variant's grid point is
    chosen on validation loss (optionally by successive halving, ``tuning``); the chosen
    point is reported on the test split, paired by seed against the baseline, and every
    comparison ends in a decision: better, worse, equivalent within ``margin`` (two one-sided
    tests), or undetermined."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tune: bool = True  # search the grid per variant (needs >= 2 grid points)
    baseline: str = "softmax"  # the variant every other is compared with, seed by seed (with baselines: their first)
    # several baselines, e.g. [softmax, linear]: one difference, interval and decision per baseline (the first leads)
    baselines: list[str] | None = Field(default=None, min_length=1)
    # a paired 95% interval and a decision against the baseline (needs >= 2 seeds); false: the report
    # shows each row's per-seed differences and their mean, and no interval or decision
    interval: bool = True
    choose_on: Literal["val"] = "val"  # the split the choice reads (never the test split)
    report_on: Literal["test"] = "test"  # the split the headline numbers come from
    # the test metric decisions read; default: accuracy (the task's answers) for task data, loss for text
    metric: Literal["loss", "accuracy"] | None = None
    # equivalence margin in the metric's units (TOST); None: no equivalence
    margin: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tuning: Tuning | None = None  # successive halving on few seeds and a short budget before the reported runs
    # seeds until decided, e.g. {min: 3, max: 10}; None: the experiment's fixed seeds list
    seeds: SeedRounds | None = None
    # fresh seeds, e.g. [6, 7, 8, 9, 10, 11], on which every decided row (better, worse, equivalent) and its
    # baseline are trained again once the decisions are made: each decision is then repeated, undetermined
    # or reversed on seeds that took no part in choosing or deciding (attnbench replicate does it afterwards)
    replicate: list[int] | None = Field(default=None, min_length=2)
    # time to learn: the validation level a run must first reach (accuracy for a task metric,
    # default 0.9 of the ceiling 1.0; a loss in nats per token for text, no default)
    learn_target: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    expectations: list[Expectation] = []  # published findings this run checks, shown with what it found

    @model_validator(mode="before")
    @classmethod
    def _baseline_leads(cls, raw: Any) -> Any:
        """``baselines`` given: ``baseline`` is its first (stated both ways, they must agree)."""
        listed = raw.get("baselines") if isinstance(raw, dict) else None
        if not (isinstance(listed, list) and listed and isinstance(listed[0], str)):
            return raw
        if raw.get("baseline", listed[0]) != listed[0]:
            raise ValueError(
                f"protocol.baseline {raw['baseline']!r} is not the first of protocol.baselines "
                f"{listed}; give one of the two, or list {raw['baseline']!r} first"
            )
        return {**raw, "baseline": listed[0]}

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_rounds(cls, v: Any) -> Any:
        """A list here is the experiment's fixed seeds, written one level too deep."""
        if isinstance(v, list):
            raise ValueError(
                f"protocol.seeds takes seeds until decided as a mapping, e.g. {{min: 3, max: 10}}; a list of "
                f"seeds belongs in the experiment's own seeds: (beside protocol:, e.g. seeds: {v})"
            )
        return v

    @field_validator("replicate", mode="before")
    @classmethod
    def _fresh_seeds(cls, v: Any) -> Any:
        """Distinct non-negative integer seeds (true/false would be read as 1 / 0)."""
        if isinstance(v, list) and (
            any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in v) or len(set(v)) < len(v)
        ):
            raise ValueError(
                f"protocol.replicate takes distinct non-negative integer seeds, got {v}; "
                "e.g. replicate: [6, 7, 8, 9, 10, 11]"
            )
        return v

    @field_validator("learn_target", "margin", mode="before")
    @classmethod
    def _a_number(cls, v: Any, info: ValidationInfo) -> Any:
        """YAML's true/false would otherwise be read as 1.0 / 0.0."""
        if isinstance(v, bool):
            what = {
                "learn_target": (
                    "a validation accuracy in (0, 1] for a task, a loss in nats per token for text",
                    "learn_target: 0.9",
                ),
                "margin": ("the equivalence margin in the metric's units", "margin: 0.05"),
            }[str(info.field_name)]
            raise ValueError(
                f"protocol.{info.field_name} is a number ({what[0]}), not {str(v).lower()}; give e.g. {what[1]}, "
                "or leave it out for the default"
            )
        return v

    @field_validator("baselines")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"protocol.baselines names a variant twice: {v}; list each baseline once")
        return v

    def compared_with(self) -> list[str]:
        """The baselines, the leading one first."""
        return list(self.baselines or [self.baseline])

    def baseline_keys(self) -> list[tuple[str, str]]:
        """(key, variant) of each baseline, as a suite writes it: protocol.baselines[i] or protocol.baseline."""
        if self.baselines:
            return [(f"protocol.baselines[{i}]", name) for i, name in enumerate(self.baselines)]
        return [("protocol.baseline", self.baseline)]


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
