"""What the GPU check runs: its steps in order with their time boxes, the sizes of the real
run (one H100 or H200, 9 minutes in all) and of the CPU dry run, and the suite the smoke, GPT-2 and
speed steps run through `attnbench run`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUITE_NAME = "gpu-check"
FLA_VARIANTS = ("linear", "gla", "gated_deltanet", "mamba2")  # kernel: fla, beside our own kernels
SPEED_VARIANTS = ("softmax", "linear", "gla", "gated_deltanet", "mamba2")
LONG_T = 16384  # the target: linear-time variants ahead of SDPA here


@dataclass(frozen=True)
class Step:
    """One step: ``box_s`` is the most it may take, ``floor_s`` what is kept back for it
    while earlier steps run; ``cuda`` names what in it needs CUDA."""

    name: str
    title: str
    box_s: float
    floor_s: float
    cuda: str


@dataclass(frozen=True)
class Sizes:
    """One mode's settings: the device, the whole budget, the steps' boxes, the variants."""

    mode: str  # "gpu" or "dry-run"
    device: str
    budget_s: float
    steps: tuple[Step, ...]
    variants: tuple[str, ...] | None  # None: every built-in variant
    variants_note: str
    check_time_limit_s: float
    smoke: dict[str, Any]
    hybrid: tuple[str, ...]
    gpt2: dict[str, Any]
    gpt2_warm_steps: int  # steady tokens/s is measured after this step (compilation and warm-up before it)
    speed: dict[str, Any]
    fla: bool  # the fla step runs the `kernel: fla` experiment (else it is skipped as needing CUDA)
    fla_time_limit_s: float  # per gate and per speed point in that experiment: first use compiles
    skipped_parts: dict[str, str] = field(default_factory=dict)  # step -> what is left out, and why


GPU_STEPS = (
    Step("env", "environment", 90, 20, ""),
    Step("check", "attnbench check, fp32 and bf16 autocast", 120, 45, "the bf16/fp16 autocast checks"),
    Step("smoke", "200-step bf16 training smoke", 120, 45, "bf16 autocast"),
    Step("gpt2", "GPT-2 small, bf16, compiled: tokens/s and MFU", 150, 60, "bf16, torch.compile, the bf16 peak"),
    # speed: on an H200 the softmax cell took 36 s (one process per sweep)
    Step("speed", "speed and memory against length", 270, 60, "SDPA's CUDA kernels"),
    # fla: opt-in, a device call of its own. Its first use compiles and autotunes Triton kernels per
    # dtype and head size: on an H100 (2026-11-27, bench_fla_warmup.py at 6e33797) 82 s for linear's
    # bf16 forward + backward, 78 s for its fp32 forward; a gate (fp32, bf16, fp16) plus the speed
    # shape is ~4 of those per variant, so the 9-minute check cannot hold it
    Step("fla", "kernel: fla against SDPA, speed and memory (first use compiles)", 540, 60, "fla's Triton kernels"),
    Step("report", "report and summary", 60, 20, ""),
)
OPT_IN_STEPS = ("fla",)  # run only when named in --steps

DRY_STEPS = (
    Step("env", "environment", 20, 5, ""),
    Step("check", "attnbench check, fp32 (bf16 autocast needs CUDA)", 30, 10, "the bf16/fp16 autocast checks"),
    Step("smoke", "training smoke (fp32, 20 steps)", 20, 5, "bf16 autocast"),
    Step("gpt2", "tiny GPT-2 stand-in (fp32, not compiled)", 15, 5, "bf16, torch.compile, the bf16 peak"),
    Step("speed", "speed and memory against length (tiny)", 30, 10, "SDPA's CUDA kernels"),
    Step("fla", "kernel: fla (needs CUDA)", 10, 0, "fla's Triton kernels"),
    Step("report", "report and summary", 20, 5, ""),
)

_TRAIN_COMMON = {"checkpoint": False, "checkpoint_interval": 0}

GPU = Sizes(
    mode="gpu",
    device="cuda",
    budget_s=540,
    steps=GPU_STEPS,
    variants=None,
    variants_note="every built-in variant",
    check_time_limit_s=120,
    smoke={
        "model": {"d_model": 256, "n_layer": 4, "n_head": 4},
        "data": {"source": "builtin"},
        "train": {
            "batch_size": 16,
            "seq_len": 256,
            "lr": 1.0e-3,
            "warmup_steps": 20,
            "budget": {"steps": 200},
            "eval_interval": 200,
            "eval_tokens": 16384,
            "log_interval": 20,
            **_TRAIN_COMMON,
        },
    },
    hybrid=("gated_deltanet", "softmax"),
    gpt2={
        "model": {"d_model": 768, "n_layer": 12, "n_head": 12},
        # GPT-2's vocabulary size, so the LM head costs what GPT-2 small's does (BPE trained locally, offline)
        "data": {"source": "builtin", "tokenizer": "bpe", "bpe_vocab_size": 50257},
        "train": {
            "batch_size": 16,
            "seq_len": 1024,
            "lr": 6.0e-4,
            "warmup_steps": 10,
            "beta2": 0.95,
            "budget": {"steps": 120},
            "compile": True,
            "eval_interval": 120,
            "eval_tokens": 16384,
            "log_interval": 10,
            **_TRAIN_COMMON,
        },
    },
    gpt2_warm_steps=30,
    speed={
        "model": {"d_model": 768, "n_layer": 2, "n_head": 12},
        "speed": {
            "lengths": [1024, 2048, 4096, 8192, 16384, 32768],
            "modes": ["train_step"],
            "batch_size": 1,
            "min_rounds": 3,
            "max_time": 0.5,
            "max_remeasure": 1,
            "time_limit_s": 60,
            "fit_T_min": 4096,
        },
    },
    fla=True,
    fla_time_limit_s=420,  # covers first-use compilation (above): a gate compiles ~4 times
)

DRY = Sizes(
    mode="dry-run",
    device="cpu",
    budget_s=90,
    steps=DRY_STEPS,
    variants=("softmax", "linear"),
    variants_note="dry run: 2 of the built-in variants (softmax, linear), to keep CI cheap; the GPU run takes all",
    check_time_limit_s=30,
    smoke={
        "model": {"d_model": 32, "n_layer": 2, "n_head": 2},
        "data": {"source": "builtin", "max_bytes": 50000},
        "train": {
            "batch_size": 4,
            "seq_len": 32,
            "lr": 3.0e-3,
            "warmup_steps": 2,
            "budget": {"steps": 20},
            "eval_interval": 20,
            "eval_tokens": 512,
            "log_interval": 5,
            **_TRAIN_COMMON,
        },
    },
    hybrid=("linear", "softmax"),
    gpt2={
        "model": {"d_model": 32, "n_layer": 2, "n_head": 2},
        "data": {"source": "builtin", "max_bytes": 50000},
        "train": {
            "batch_size": 2,
            "seq_len": 64,
            "budget": {"steps": 8},
            "eval_interval": 8,
            "eval_tokens": 256,
            "log_interval": 2,
            **_TRAIN_COMMON,
        },
    },
    gpt2_warm_steps=2,
    speed={
        "model": {"d_model": 32, "n_layer": 1, "n_head": 2},
        "speed": {
            "lengths": [32, 64],
            "modes": ["train_step"],
            "batch_size": 1,
            "min_rounds": 2,
            "max_time": 0.02,
            "max_remeasure": 0,
            "time_limit_s": 30,
            "fit_T_min": 0,
        },
    },
    fla=False,
    fla_time_limit_s=30,
    skipped_parts={
        "check": "the bf16 and fp16 autocast checks (amp@scale) need CUDA",
        "smoke": "bf16 autocast needs CUDA: fp32, 20 steps at a tiny size",
        "gpt2": "GPT-2 small, bf16, torch.compile and the bf16 peak need CUDA: a tiny fp32 model, not compiled",
        "speed": "SDPA's CUDA kernels need CUDA: our kernels only, T 32 and 64",
        "fla": "kernel: fla needs CUDA and flash-linear-attention: not run",
    },
)


def sizes(dry_run: bool) -> Sizes:
    return DRY if dry_run else GPU


def suite(s: Sizes, variants: list[str]) -> dict[str, Any]:
    """The generated suite (written to the output folder as suite.yaml). Failed gate checks do
    not stop the numbers: the check step reports them, and the stored rows are marked."""
    speed_variants = [v for v in SPEED_VARIANTS if v in variants]
    experiments: list[dict[str, Any]] = [
        {
            "name": "smoke",
            "kind": "train",
            "variants": variants,
            "models": [s.smoke["model"], {**s.smoke["model"], "layers": {"pattern": list(s.hybrid)}}],
            "data": s.smoke["data"],
            "train": s.smoke["train"],
        },
        {
            "name": "gpt2",
            "kind": "train",
            "variants": ["softmax"],
            "models": [s.gpt2["model"]],
            "data": s.gpt2["data"],
            "train": s.gpt2["train"],
        },
    ]
    ours = {"name": "speed", "kind": "speed", "models": [s.speed["model"]], "speed": s.speed["speed"]}
    if speed_variants:
        experiments.append({**ours, "variants": speed_variants})
    fla = [v for v in FLA_VARIANTS if v in variants]
    if s.fla and fla and "softmax" in variants:  # the fla step's: its own softmax baseline, linear first
        experiments.append(
            {
                **ours,
                "name": "speed-fla",
                "variants": ["softmax", *fla],
                "variant_options": {v: {"kernel": "fla"} for v in fla},
                "speed": {**s.speed["speed"], "time_limit_s": s.fla_time_limit_s},
            }
        )
    return {
        "version": 1,
        "name": SUITE_NAME,
        "description": f"GPU check ({s.mode}): training smoke, GPT-2 small throughput, speed against length.",
        "device": s.device,
        "allow_failed_checks": True,
        # a gate not yet stored runs here (the fla kernels' always: `attnbench check` runs the defaults)
        "check_time_limit_s": s.fla_time_limit_s if s.fla else s.check_time_limit_s,
        "experiments": experiments,
    }
