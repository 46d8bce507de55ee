"""The fair-comparison protocol of a train experiment (``protocol:``): how each variant's point
is chosen (optionally by successive halving), how many seeds decide a row, how decisions are
replicated, and the published findings a run tests."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from attnbench.plan.base import Budget


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
