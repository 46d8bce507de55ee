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

    model_config = ConfigDict(extra="forbid", frozen=True)
    lengths: list[int] | None = None  # explicit sequence lengths
    T_min: int = Field(default=256, gt=0)
    T_max: int = Field(default=4096, gt=0)
    modes: list[Literal["forward", "train_step", "decode"]] = Field(
        default_factory=lambda: list(SPEED_MODES), min_length=1
    )
    batch_size: int = Field(default=1, gt=0)
    decode_contexts: list[int] | None = None  # context lengths for decode (default: the lengths)
    decode_tokens: int = Field(default=8, gt=0)  # single-token steps per timed call (time is per token)
    min_rounds: int = Field(default=3, gt=0)  # pytest-benchmark: rounds at least
    max_time: float = Field(default=1.0, gt=0)  # pytest-benchmark: seconds of rounds when calls are fast
    warmup: int = Field(default=1, ge=0)  # pytest-benchmark warm-up iterations; 0 = off
    max_remeasure: int = Field(default=2, ge=0)  # times a noisy point (spread > 20% or load) is timed again
    time_limit_s: float = Field(default=120.0, gt=0)  # per point: its isolated run (start, setup, one call)
    # CPU cap per isolated point; default half the free memory
    memory_limit_gb: float | None = Field(default=None, gt=0)
    dtype: Literal["auto", "fp32", "bf16"] = "auto"  # auto: fp32 on CPU, bf16 autocast on CUDA
    threads: int | None = Field(default=None, gt=0)  # CPU threads (torch.set_num_threads); default torch's
    fit_T_min: int = Field(default=0, ge=0)  # slopes fit the ok points with T >= this
    model_kind: Literal["backbone", "own"] = "backbone"
    compile: bool = False  # torch.compile forward and train_step points (decode runs eagerly; recorded)

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
    speed: SpeedSpec = SpeedSpec()

    def spec(self) -> SpeedSpec:
        return self.speed

    def context(self, spec: BaseModel) -> int:
        return spec_as(spec, SpeedSpec, self.name).context_needed()
