"""What a ``kind: speed`` experiment accepts: the lengths, modes and measurement settings of a
speed and peak-memory sweep (run by attnbench.experiments.speed)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from attnbench.plan.base import ExperimentBase, spec_as

SPEED_MODES = ("forward", "train_step", "decode")


class SpeedSpec(BaseModel):
    """Speed and peak memory against sequence length (harness/speed.py).

    Lengths are ``lengths`` when given, else T_min, 2 T_min, ... up to T_max. Each
    (variant, model, seed) cell sweeps them upward per mode; a point that fails (out of
    memory, over ``time_limit_s``, error) is stored as such and ends that mode's sweep.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    lengths: list[int] | None = None
    """Sequence lengths to time, in tokens. None: T_min, 2 T_min, ... up to T_max."""
    T_min: int = Field(default=256, gt=0)
    """Shortest length timed when `lengths` is not given."""
    T_max: int = Field(default=4096, gt=0)
    """Longest length timed when `lengths` is not given."""
    modes: list[Literal["forward", "train_step", "decode"]] = Field(
        default_factory=lambda: list(SPEED_MODES), min_length=1
    )
    """What is timed: forward, train_step (forward, backward and optimizer step), decode (per generated token)."""
    batch_size: int = Field(default=1, gt=0)
    """Sequences per timed call."""
    decode_contexts: list[int] | None = None
    """Context lengths decode is timed at. None: the lengths."""
    decode_tokens: int = Field(default=8, gt=0)
    """Single-token steps per timed decode call (the time reported is per token)."""
    min_rounds: int = Field(default=3, gt=0)
    """Timed rounds per point, at least (pytest-benchmark)."""
    max_time: float = Field(default=1.0, gt=0)
    """Seconds of timed rounds per point when calls are fast (pytest-benchmark)."""
    warmup: int = Field(default=1, ge=0)
    """Untimed warm-up iterations before each point's rounds; 0 = off (pytest-benchmark)."""
    max_remeasure: int = Field(default=2, ge=0)
    """Times a noisy point (spread above 20%, or the machine under load) is timed again before it is flagged."""
    time_limit_s: float = Field(default=120.0, gt=0)
    """Seconds each point's isolated run may take (start, setup and one call); over it, the point is recorded as a
    time-out and the mode's sweep ends."""
    memory_limit_gb: float | None = Field(default=None, gt=0)
    """Memory cap of each isolated point on a CPU, in GB; over it, the point is recorded as out of memory. None: half
    the free memory."""
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
    """Timing precision: auto (fp32 on a CPU, bf16 autocast on CUDA), fp32 or bf16."""
    threads: int | None = Field(default=None, gt=0)
    """CPU threads (torch.set_num_threads). None: torch's default."""
    fit_T_min: int = Field(default=0, ge=0)
    """The log-log slopes fit the points with T at least this (0: every point that ran)."""
    model_kind: Literal["backbone", "own"] = "backbone"
    """backbone: the shared backbone around the variant's mixer; own: the variant's own reference model."""
    compile: bool = False
    """torch.compile the forward and train_step points (decode runs eagerly; recorded with each point)."""

    @field_validator("lengths", "decode_contexts")
    @classmethod
    def _positive_sorted(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v or any(t <= 0 for t in v):
            raise ValueError(f"give one or more positive lengths, got {v}")
        return sorted(set(v))

    @field_validator("modes")
    @classmethod
    def _unique_modes(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"modes are repeated: {v}")
        return v

    @model_validator(mode="after")
    def _range(self) -> SpeedSpec:
        if self.lengths is None and self.T_min > self.T_max:
            raise ValueError(f"T_min ({self.T_min}) must be <= T_max ({self.T_max})")
        return self

    def sweep(self, mode: str) -> list[int]:
        """The lengths one mode sweeps, increasing (decode: context lengths)."""
        if mode == "decode" and self.decode_contexts is not None:
            return list(self.decode_contexts)
        if self.lengths is not None:
            return list(self.lengths)
        out, T = [], self.T_min
        while self.T_max >= T:
            out.append(T)
            T *= 2
        return out

    def context_needed(self) -> int:
        return max(max(self.sweep(m)) + (self.decode_tokens if m == "decode" else 0) for m in self.modes)


class SpeedExperiment(ExperimentBase):
    kind: Literal["speed"]
    """speed: time and peak memory of forward, training step and decode against sequence length."""
    speed: SpeedSpec = SpeedSpec()
    """The speed settings (see Speed settings)."""

    def spec(self) -> SpeedSpec:
        return self.speed

    def context(self, spec: BaseModel) -> int:
        return spec_as(spec, SpeedSpec, self.name).context_needed()
