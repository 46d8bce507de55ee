"""Experiments on the checkpoints of a train experiment of the same suite: lm-eval tasks
(``kind: lm_eval``) and fine-tuning (``kind: finetune``). Each names its source with
``from_experiment`` and plans one cell per trained cell it reads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from attnbench.data.spec import DataSpec
from attnbench.plan.base import ExperimentBase, TrainSpec, spec_as


class LmEvalSpec(BaseModel):
    """lm-eval tasks on the checkpoints of a train experiment (harness/lm_eval_runner.py).

    Paths (``include_path``, the values of ``paths``) are relative to the suite file and
    made absolute before lm-eval runs; ``paths`` entries join ``metadata``, which lm-eval
    hands to every task (e.g. ``text_path`` of the held-out text task).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    tasks: list[str] = Field(min_length=1)
    """lm-eval task, group or tag names to score (at least one)."""
    from_experiment: str = Field(min_length=1)
    """The train experiment of this suite whose checkpoints are evaluated."""
    include_path: str | list[str] | None = None
    """Folders of extra lm-eval task YAML files, relative to the suite file. None: lm-eval's own tasks only."""
    limit: int | float | None = Field(default=None, gt=0)
    """Documents per task: a count, or below 1 a fraction of each task. None: every document."""
    num_fewshot: int | None = Field(default=None, ge=0)
    """Few-shot examples put before each document. None: each task's own default."""
    batch_size: int = Field(default=16, gt=0)
    """Documents scored per forward pass."""
    bootstrap_iters: int = Field(default=1000, ge=0)
    """Bootstrap resamples lm-eval draws for each metric's standard error; 0 = no standard errors."""
    offline: bool = True
    """Switch the Hugging Face hub off while lm-eval runs, so data that is not local fails at once
    instead of hanging."""
    metadata: dict[str, Any] = {}
    """Passed to lm-eval's task manager as task metadata (e.g. max_seq_lengths)."""
    paths: dict[str, str] = {}
    """Named local files a task YAML reads, relative to the suite file; passed in metadata as absolute paths (e.g.
    text_path of the held-out text task)."""
    model: Literal["attnbench", "hf"] = "attnbench"
    """attnbench: the checkpoint scored through `--model attnbench`; hf: exported into the store's folder (exports/)
    and scored through lm-eval's `--model hf` (needs attnbench[hf])."""
    truncate: Literal["none", "left"] = "none"
    """none: a document longer than the checkpoint's context fails the cell; left: it is scored on its tail, and the
    truncated documents are counted."""

    def resolved(self, base_dir: Any) -> LmEvalSpec:
        """A copy with every path made absolute against ``base_dir`` (the suite's folder)."""
        from pathlib import Path

        def fix(p: str) -> str:
            return str((base_dir / Path(p).expanduser()).resolve())

        inc = self.include_path
        inc = None if inc is None else [fix(p) for p in ([inc] if isinstance(inc, str) else inc)]
        return self.model_copy(update={"include_path": inc, "paths": {k: fix(v) for k, v in self.paths.items()}})


class LmEvalExperiment(ExperimentBase):
    """One cell per cell of ``lm_eval.from_experiment`` with this experiment's variant, model
    size and seed; each evaluates that trained cell's checkpoint (and its key is part of
    the lm_eval cell's key). Where that experiment tunes (protocol.tuning), the cells read are
    its chosen point's final cells, planned once the choice is stored."""

    kind: Literal["lm_eval"]
    """lm_eval: lm-eval tasks on the checkpoints of a train experiment of this suite."""
    lm_eval: LmEvalSpec
    """The lm-eval settings (see lm-eval settings)."""

    def spec(self) -> LmEvalSpec:
        return self.lm_eval

    def context(self, spec: BaseModel) -> int:
        return 1  # nothing is trained here: the evaluated model keeps its trained context


class FinetuneSpec(TrainSpec):
    """Fine-tuning the checkpoints of a train experiment (harness/experiments/finetune/).

    ``method: lora`` trains low-rank adapters (PEFT) at each of ``ranks`` on the modules
    ``target`` selects ("mixer": the Linear layers of every token mixer; "linear": every
    Linear layer; or a list of module-name suffixes); everything else is frozen.
    ``method: full`` trains every weight (the reference row). ``from_scratch: true`` starts
    from initialisation instead of the checkpoint; the targeted matrices stay frozen at
    their initial values plus their adapter and every other weight trains (the seed's
    second table).
    """

    from_experiment: str = Field(min_length=1)
    """The train experiment of this suite whose checkpoints are fine-tuned."""
    method: Literal["lora", "full"] = "lora"
    """lora: low-rank adapters on `target`, everything else frozen; full: every weight trains (the reference row)."""
    ranks: list[int] = Field(default_factory=lambda: [1, 4, 16])
    """LoRA ranks; one cell per rank (method: lora only)."""
    rank: int | None = None
    """Set per cell from `ranks`; do not give it."""
    target: Literal["mixer", "linear"] | list[str] = "mixer"
    """What LoRA adapts: mixer (the Linear layers of every token mixer), linear (every Linear layer), or a list of
    module-name suffixes."""
    lora_alpha: float | None = Field(default=None, gt=0)
    """LoRA scale numerator: the adapter's output is scaled by lora_alpha / rank. None: 2 x rank (PEFT's guidance)."""
    from_scratch: bool = False
    """Start from initialisation instead of the trained checkpoint: the targeted matrices stay frozen at their initial
    values plus their adapter, and every other weight trains."""
    checkpoint: bool = False
    """Keep the tuned model (method: full only), e.g. for `attnbench inspect`."""
    warmup_steps: int = Field(default=10, ge=0)
    """Steps of linear warm-up from 0 to lr before the cosine decay."""

    @field_validator("eval_lengths")
    @classmethod
    def _no_lengths(cls, v: list[int] | None) -> None:
        if v is not None:
            raise ValueError("eval_lengths applies to train and scaling experiments; remove it from this finetune")
        return None

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v: list[int]) -> list[int]:
        if not v or any(r < 1 for r in v) or len(set(v)) != len(v):
            raise ValueError(f"ranks must be distinct positive integers, got {v}")
        return v

    @model_validator(mode="after")
    def _checkpoint_full_only(self) -> FinetuneSpec:
        if self.checkpoint and self.method != "full":
            raise ValueError(
                "checkpoint: true keeps a tuned model for method: full only "
                "(LoRA adapters are not merged into a checkpoint); remove it or use method: full"
            )
        return self

    @field_validator("target")
    @classmethod
    def _target(cls, v: Any) -> Any:
        if isinstance(v, list) and (not v or not all(isinstance(t, str) and t for t in v)):
            raise ValueError("target is 'mixer', 'linear' or a non-empty list of module names")
        return v


class FinetuneExperiment(ExperimentBase):
    """One cell per cell of ``finetune.from_experiment`` with this experiment's variant, model
    size and seed, and per rank (lora); the trained cell's key is part of each cell's key."""

    kind: Literal["finetune"]
    """finetune: fine-tune the checkpoints of a train experiment of this suite."""
    data: DataSpec = DataSpec()
    """The fine-tuning data (see Data); defaults.data fills what it leaves out."""
    finetune: FinetuneSpec
    """Fine-tuning settings (see Fine-tuning settings)."""

    def points(self) -> list[dict[str, Any]]:
        return [{"rank": r} for r in self.finetune.ranks] if self.finetune.method == "lora" else [{}]

    def spec(self) -> FinetuneSpec:
        return self.finetune

    def context(self, spec: BaseModel) -> int:
        return spec_as(spec, FinetuneSpec, self.name).seq_len
