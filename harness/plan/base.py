"""The building blocks every experiment kind's schema shares: budgets, training settings,
model sizes, the common experiment fields, the comparison protocol and grids."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator


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


class Tuning(BaseModel):
    """Successive halving over the grid before the reported runs: every grid point trains on
    ``seeds`` at ``budget``; the best 1/``eta`` of the points (mean validation loss) go on at
    ``eta`` x that budget, and so on while more than one point is left and the next budget
    stays below the experiment's; the survivor is then trained at the experiment's budget on
    every seed. Every tuning run stays in the store; the choice reads validation data only
    (``criterion``: loss, or a task's accuracy on answers)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """Seeds of the tuning runs (every grid point trains on each)."""
    budget: Budget
    """The first rung's budget: in the same unit as train.budget, and smaller."""
    eta: int = Field(default=3, ge=2)
    """Halving rate: each rung keeps the best 1/eta of its points and trains them at eta times the budget."""
    criterion: Literal["loss", "accuracy"] = "loss"
    """What ranks the points: loss (validation loss, lowest first) or accuracy (a task's validation answers, highest
    first, ties by loss); a search window's extension reads it too."""


class SeedRounds(BaseModel):
    """Seeds until decided: every variant runs seeds 0..``min``-1; then each row still
    undetermined against the baseline gets the next seed (and the baseline with it, for
    pairing), round by round, until it is decided or has ``max``. Decided rows stop. Decisions
    read a group-sequential paired t design with Lan-DeMets ``spending``, valid under this
    optional stopping."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    min: int = Field(default=3, ge=2)
    """Seeds of the first round, run by every variant (seeds 0 to min - 1)."""
    max: int = Field(default=10, le=50)
    """Most seeds a row may reach before it is left undetermined."""
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"
    """Alpha-spending function (Lan-DeMets type) spreading the test's error rate over the looks: obrien_fleming spends
    little early, pocock evenly."""

    @model_validator(mode="after")
    def _ordered(self) -> SeedRounds:
        if self.max < self.min:
            raise ValueError(f"seeds.max ({self.max}) is below seeds.min ({self.min}); give max >= min")
        return self


class Expectation(BaseModel):
    """A published finding the run can test: ``variant`` against ``versus`` on the protocol's
    metric (at one evaluation setting, or the headline test metric), with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    claim: str = Field(min_length=1)
    """The finding, in words, as the report prints it."""
    source: str = Field(min_length=1)
    """Where it is published (paper, figure or table)."""
    variant: str = Field(min_length=1)
    """The variant the claim is about (one the experiment runs)."""
    versus: str | None = None
    """The variant it is compared with; None: the protocol's baseline."""
    outcome: Literal["better", "worse", "equivalent"]
    """What the source expects of variant against versus on the protocol's metric: better, worse or equivalent."""
    setting: dict[str, Any] | None = None
    """The eval setting the claim is tested at: one of data.eval_settings (e.g. {n_pairs: 16}); None: the headline test
    metric."""
    trend: str | None = Field(default=None, min_length=1)
    """For a claim about a trend along one setting axis (e.g. num_kv_pairs: "recall falls as pairs grow"): that axis.
    `setting` is then its hardest point, and the claim is tested only where the variant learned at the easiest
    setting of the axis, else reads "not testable"."""


class Protocol(BaseModel):
    """The fair-comparison protocol of a train experiment: each variant's grid point is
    chosen on validation loss (optionally by successive halving, ``tuning``); the chosen
    point is reported on the test split, paired by seed against the baseline, and every
    comparison ends in a decision: better, worse, equivalent within ``margin`` (two one-sided
    tests), or undetermined."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    tune: bool = True
    """Choose each variant's own grid point on validation data (needs a grid of at least 2 points); false: every point
    is reported."""
    baseline: str = "softmax"
    """The variant every other is compared with, seed by seed (with `baselines` given: their first)."""
    baselines: list[str] | None = Field(default=None, min_length=1)
    """Several baselines, e.g. [softmax, linear]: one difference, interval and decision per baseline, the first
    leading. None: `baseline` alone."""
    interval: bool = True
    """A paired 95% interval and a decision against the baseline (needs at least 2 seeds); false: the report shows each
    row's per-seed differences and their mean, and no interval or decision."""
    choose_on: Literal["val"] = "val"
    """The split each variant's grid point is chosen on; always val, never the test split."""
    report_on: Literal["test"] = "test"
    """The split the headline numbers and decisions come from; always test."""
    metric: Literal["loss", "accuracy"] | None = None
    """The test metric decisions read: loss (nats per token) or accuracy (a task's answers). None: accuracy for task
    data, loss for text."""
    margin: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Equivalence margin in the metric's units: a difference whose interval lies within +-margin reads equivalent (two
    one-sided tests). None: no equivalence decision."""
    tuning: Tuning | None = None
    """Successive halving over the grid on few seeds and a short budget before the reported runs (see Tuning). None:
    every grid point trains at the full budget on every seed."""
    seeds: SeedRounds | None = None
    """Seeds until decided, e.g. {min: 3, max: 10}: undetermined rows get more seeds (see Seeds until decided). None:
    the experiment's fixed seeds."""
    replicate: list[int] | None = Field(default=None, min_length=2)
    """Fresh seeds, e.g. [6, 7, 8, 9, 10, 11], on which every decided row and its baseline train again once the
    decisions are made: each decision then reads repeated, undetermined or reversed. None: no in-run replication
    (`attnbench replicate` can do it afterwards)."""
    learn_target: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Time to learn: the validation level a run must first reach. An accuracy for a task metric (default 0.9 of the
    ceiling 1.0); a loss in nats per token for text (no default: None reports no time to learn)."""
    expectations: list[Expectation] = []
    """Published findings this run tests, each shown in the report with what the run found."""

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
