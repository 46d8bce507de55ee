"""Step 1, environment: torch, CUDA and driver versions, the GPU, whether triton and fla import,
torch against the project's floor, and the built-in variants the later steps run."""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

import torch
from packaging.requirements import Requirement
from packaging.version import Version

FLA_PROBE = "fla.ops.linear_attn"  # the op `kernel: fla` calls on linear; imports triton


def torch_floor() -> tuple[str | None, bool]:
    """(attnbench's torch requirement, whether this torch satisfies it)."""
    for raw in metadata.requires("attnbench") or []:
        req = Requirement(raw)
        if req.name == "torch":
            # base_version drops the local tag (2.11.0+cu130 -> 2.11.0), which a specifier would refuse
            return str(req.specifier), req.specifier.contains(Version(torch.__version__).base_version)
    return None, True


def _module(name: str, probe: str | None = None) -> dict[str, Any]:
    """Version and location of an importable module (and of ``probe``, imported after it), or the error."""
    try:
        mod = importlib.import_module(name)
        if probe:
            importlib.import_module(probe)
    except Exception as exc:  # an import can fail in many ways (missing driver, old triton): record it
        return {"imports": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    version = getattr(mod, "__version__", None)
    return {"imports": True, "version": str(version) if version else None, "path": getattr(mod, "__file__", None)}


def _nvidia_smi() -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"available": False, "error": "nvidia-smi not on PATH"}
    query = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "error": str(exc)}
    if out.returncode != 0:
        return {"available": False, "error": (out.stderr or out.stdout).strip()[:400]}
    values = [c.strip() for c in out.stdout.splitlines()[0].split(",")]  # the first GPU's line
    return {"available": True, **dict(zip(query.split(","), values, strict=False))}


def _cuda() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"available": False}
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return {
        "available": True,
        "device_count": torch.cuda.device_count(),
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_total_bytes": total,
        "memory_free_bytes": free,
        "cudnn": torch.backends.cudnn.version(),
        "sdpa_enabled": {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
        },
        "bf16_supported": torch.cuda.is_bf16_supported(),
    }


def builtin_variants() -> tuple[list[str], list[str]]:
    """(the variants attnbench itself ships, the plugins that failed to load)."""
    from attnbench.registry.loader import load_registry

    registry = load_registry()
    names = [n for n in registry.names() if registry.get(n).distribution == "attnbench"]
    return names, [f"{e.plugin}: {e.error}" for e in registry.errors]


def collect(probe_kernels: bool) -> dict[str, Any]:
    """The environment step's figures; ``probe_kernels``: import fla's Triton ops too, not only fla."""
    import attnbench

    floor, torch_ok = torch_floor()
    variants, plugin_errors = builtin_variants()
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda, "path": torch.__file__},
        "torch_floor": floor,
        "torch_meets_floor": torch_ok,
        "attnbench": {"version": attnbench.__version__, "path": attnbench.__file__},
        "cuda": _cuda(),
        "nvidia_smi": _nvidia_smi(),
        "triton": _module("triton"),
        "fla": _module("fla", FLA_PROBE if probe_kernels else None) | {"probed": FLA_PROBE if probe_kernels else None},
        "builtin_variants": variants,
        "plugin_errors": plugin_errors,
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }


def problem(figures: dict[str, Any], needs_cuda: bool) -> str | None:
    """What stops the later steps, if anything."""
    if not figures["torch_meets_floor"]:
        return f"torch {figures['torch']['version']} is below the project's floor ({figures['torch_floor']})"
    if figures["plugin_errors"]:
        return f"plugins failed to load: {'; '.join(figures['plugin_errors'])}"
    if needs_cuda and not figures["cuda"]["available"]:
        return "CUDA is not available to torch: the GPU steps cannot run (see nvidia_smi)"
    return None
