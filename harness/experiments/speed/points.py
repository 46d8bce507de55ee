"""The timed callables of `speed` experiments: one point is (variant, mode, T).

A point is set up once (model, inputs, optimizer or prefilled decode state) and exposes a
zero-argument ``run`` callable; the same callable is timed in-process by pytest-benchmark
(``attnbench.experiments.speed.timing``) and measured for peak memory in a fresh process by
``attnbench.experiments.speed.memory.measure_peak`` (target ``isolated_point`` below).

Modes (B = batch size, every call ends with a device synchronisation on CUDA):
  forward     ``model(x)`` in eval mode under ``no_grad``, x (B, T); B*T tokens per call.
  train_step  forward with targets, backward, AdamW step, ``zero_grad``; B*T tokens per call.
              One step runs during setup, so the optimizer state exists before measuring.
  decode      from a state prefilled with T context tokens (``init_state`` then ``step`` in
              chunks), ``decode_tokens`` single-token steps; time per token = call time /
              decode_tokens. Steps restart from the same prefilled state each call (states
              are explicit values; KV caches only rewrite their own slots beyond it).

Precision: fp32 without autocast, or bf16 autocast (parameters stay fp32), as in training.

Optional mixer method (documented here; the variant contract lists it):
  ``describe_path() -> dict``: what code path the mixer takes, e.g. ``{"chunk_size": 64,
  "kernel": "triton", "fallback": False}``. Called after the point has run once; the
  result is stored under the row's ``tags["path"]``. A ``"fallback": True`` entry marks
  the point as having run a fallback path.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from attnbench.contract.config import ModelConfig
from attnbench.contract.variant import state_tensors
from attnbench.nn.backbone import Backbone
from attnbench.nn.compile import maybe_compile
from attnbench.nn.model import LanguageModel, as_language_model

MODES: tuple[str, ...] = ("forward", "train_step", "decode")
PREFILL_CHUNK = 1024  # context tokens per prefill `step` call (bounds its transient memory)

# Profiler op names of scaled_dot_product_attention's kernels -> backend names.
_SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash-cpu",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
}
_OOM_MARKERS = ("out of memory", "not enough memory", "can't allocate memory", "cannot allocate memory")


@dataclass(frozen=True)
class PointSpec:
    """Everything needed to set a point up, in this process or a fresh one (picklable
    when ``builder`` is None or importable by reference)."""

    variant: str
    mode: str
    T: int  # sequence length; for decode, the context length
    config: ModelConfig
    batch_size: int
    device: str
    dtype: str  # "fp32" or "bf16" (autocast)
    seed: int
    decode_tokens: int = 8
    model_kind: str = "backbone"  # "backbone" (shared GPT-2 + mixer) or "own"
    compile: bool = False  # torch.compile forward / train_step (decode runs eagerly, recorded)
    # build_mixer (backbone) or build_model (own); None: the child looks the variant up.
    builder: Callable[..., Any] | None = field(default=None, compare=False)


@dataclass
class Point:
    run: Callable[[], None]
    model: LanguageModel
    tokens_per_call: int  # tokens processed (forward/train) or generated (decode) per call
    per_call_divisor: int  # decode: tokens per call, so time / divisor is per token
    info: dict[str, Any] = field(default_factory=dict)  # measured extras (decode state bytes)


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    if dtype == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _build_model(spec: PointSpec) -> LanguageModel:
    if spec.builder is not None:  # build_model (own) or build_mixer (backbone)
        if spec.model_kind == "own":
            return as_language_model(spec.builder(spec.config), spec.variant)
        return Backbone(spec.config, spec.builder)
    from attnbench.registry.loader import load_registry  # resolve by name, as in a fresh process

    variant = load_registry().get(spec.variant)
    if spec.model_kind != "own":
        return Backbone(spec.config, variant.build_mixer)
    if variant.build_model is None:
        raise ValueError(f"variant {spec.variant!r} has no model of its own")
    return as_language_model(variant.build_model(spec.config), variant.name)


def build_point(spec: PointSpec) -> Point:
    """Set a point up and return its callable (model and inputs on ``spec.device``)."""
    if spec.mode not in MODES:
        raise ValueError(f"unknown speed mode {spec.mode!r}; use one of {MODES}")
    device = torch.device(spec.device)
    torch.manual_seed(spec.seed)
    model = _build_model(spec).to(device)
    B, T, V = spec.batch_size, spec.T, spec.config.vocab_size
    cast = lambda: autocast(device, spec.dtype)  # noqa: E731  (a fresh context per use)
    call, info = maybe_compile(model, spec.compile and spec.mode != "decode")
    if spec.compile and spec.mode == "decode":
        info = {"compile": "not applied: decode steps run eagerly"}
    if spec.mode == "forward":
        model.eval()
        x = torch.randint(0, V, (B, T), device=device)  # (B, T)

        def run() -> None:
            with torch.no_grad(), cast():
                call(x)  # logits (B, T, V)
            _sync(device)

        return Point(run, model, B * T, 1, info)
    if spec.mode == "train_step":
        model.train()
        x = torch.randint(0, V, (B, T + 1), device=device)  # (B, T+1)
        inputs, targets = x[:, :-1], x[:, 1:]  # (B, T), (B, T)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def run() -> None:
            with cast():
                out = call(inputs, targets)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            _sync(device)

        run()  # allocates AdamW's moments (and compiles, when asked): persistent state
        return Point(run, model, B * T, 1, info)
    point = _decode_point(spec, model, device, cast)
    point.info.update(info)
    return point


def _decode_point(spec: PointSpec, model: LanguageModel, device: torch.device, cast) -> Point:
    B, T, n, V = spec.batch_size, spec.T, spec.decode_tokens, spec.config.vocab_size
    model.eval()
    with torch.no_grad(), cast():
        state = model.init_state(B, T + n, device=device)
        prompt = torch.randint(0, V, (B, T), device=device)  # (B, T)
        for c0 in range(0, T, PREFILL_CHUNK):  # chunked prefill: bounded transient memory
            _, state = model.step(prompt[:, c0 : c0 + PREFILL_CHUNK], state)
    token = torch.randint(0, V, (B, 1), device=device)  # (B, 1)
    prefilled = state

    def run() -> None:
        with torch.no_grad(), cast():
            s = prefilled
            for _ in range(n):
                _, s = model.step(token, s)  # logits (B, 1, V)
        _sync(device)

    state_bytes = sum(t.numel() * t.element_size() for t in state_tensors(prefilled))
    return Point(run, model, B * n, n, {"state_bytes": state_bytes, "context": T, "decode_tokens": n})


# -- isolated measurement (the measure_peak target) ------------------------------------


def _vm_size_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _limit_address_space(extra_bytes: int) -> None:
    """Cap this process's address space at its current size + ``extra_bytes``, so an
    oversized point fails with an allocation error here instead of waking the OOM killer
    (which could pick another process on a shared machine). Linux CPU runs only."""
    import resource

    current = _vm_size_bytes()
    if current is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = current + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def isolated_point(
    spec: PointSpec, device: str, memory_limit_bytes: int | None = None, threads: int | None = None
) -> Callable[[], None]:
    """``measure_peak`` target: set the point up in a fresh process and return its call.

    ``device`` repeats ``spec.device`` because ``measure_peak`` reads it to choose the
    method (allocator peak on CUDA, VmHWM on CPU).
    """
    if threads:
        torch.set_num_threads(threads)
    if memory_limit_bytes and not device.startswith("cuda"):
        _limit_address_space(memory_limit_bytes)
    return build_point(spec).run


def for_child(spec: PointSpec) -> PointSpec:
    """The spec to send to a fresh process: the builder goes by reference when it can be
    pickled (importable at module top level), else the child looks the variant up."""
    try:
        pickle.dumps(spec.builder)
        return spec
    except Exception:
        return replace(spec, builder=None)


# -- what ran --------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ start/stop lines) for a moment."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def sdpa_backends(run: Callable[[], None]) -> str:
    """Run ``run`` once under the profiler and name the SDPA kernels that actually ran:
    "flash-cpu", "flash", "efficient", "cudnn", "math" (joined by "+" when several),
    "unknown" when SDPA ran through a kernel not listed here, "n/a" when it did not run."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    names = {e.name.removesuffix("_backward") for e in prof.events() or []}
    found = sorted({_SDPA_OPS[n] for n in names if n in _SDPA_OPS})
    if found:
        return "+".join(found)
    return "unknown" if "aten::scaled_dot_product_attention" in names else "n/a"


def describe_path(model: torch.nn.Module) -> dict[str, Any]:
    """What the modules' optional ``describe_path()`` report (one dict when all layers
    agree, else ``{"layers": [...]}``); ``{}`` when none has the method."""
    paths: list[dict[str, Any]] = []
    for module in model.modules():
        method = getattr(module, "describe_path", None)
        if not callable(method):
            continue
        try:
            described: Any = method()
            paths.append(dict(described))
        except Exception as exc:
            paths.append({"error": f"describe_path raised {type(exc).__name__}: {exc}"})
    if not paths:
        return {}
    return paths[0] if all(p == paths[0] for p in paths) else {"layers": paths}


def classify_failure(exc: BaseException) -> tuple[str, str]:
    """(status, one-line message) of an exception raised by a point: "oom" or "error"."""
    text = "".join(traceback.format_exception_only(exc)).strip()
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return "oom", text.splitlines()[0]
    return classify_message("error", text)


def classify_message(status: str, message: str) -> tuple[str, str]:
    """An "error" whose message is an allocator failure (CPU allocations report a
    RuntimeError, not OutOfMemoryError) counts as "oom"."""
    if status == "error" and any(m in message.lower() for m in _OOM_MARKERS):
        status = "oom"
    return status, message.strip()


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
