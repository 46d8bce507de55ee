"""What actually ran: code version, library versions, device. Recorded with every row."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench import __version__
from attnbench.errors import DeviceError

if TYPE_CHECKING:  # content keys and versions need no torch; devices do (imported where used)
    import torch

_PACKAGES = ("torch", "numpy", "pluggy", "datasets", "lm_eval", "pytest-benchmark")
_HARNESS_DIR = Path(__file__).resolve().parent


def content_key(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj``."""
    blob = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@functools.cache
def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "attnbench": __version__}
    for pkg in _PACKAGES:
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = "not installed"
    return versions


@functools.cache
def git_commit() -> dict[str, Any]:
    """Commit of the attnbench source tree (and whether it had uncommitted changes)."""
    root = _HARNESS_DIR.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def resolve_device(requested: str | None = None) -> torch.device:
    """The device named (``auto``: CUDA when there is one); one this machine lacks is an error."""
    import torch

    if requested in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    have = ["auto", "cpu"] + (
        ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    try:
        dev = torch.device(requested)
    except (RuntimeError, TypeError):
        dev = None
    if (
        dev is None
        or dev.type not in ("cpu", "cuda")
        or (dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()))
    ):
        raise DeviceError(
            f"device {requested!r} is not available on this machine; use one of: "
            f"{', '.join(have)} (--device, or `device:` in the suite)"
        )
    return dev


def device_name(device: torch.device) -> str:
    """A stable description of the hardware, e.g. 'cuda:NVIDIA H100 80GB HBM3' or 'cpu:x86_64'."""
    import torch

    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu:{cpu}"


def provenance(device: torch.device) -> dict[str, Any]:
    import torch

    return {
        "git": git_commit(),
        "versions": library_versions(),
        "device": device_name(device),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "argv": sys.argv,
    }
