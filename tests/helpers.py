"""Small helpers shared by tests (not fixtures: plain functions)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import torch

    from attnbench import LanguageModel

REPO = Path(__file__).resolve().parents[1]


def mixers(model: LanguageModel) -> list[Any]:
    """Each layer's token mixer of a backbone (Any: tests read each variant's own attributes)."""
    return [model.get_submodule(f"blocks.{i}.mixer") for i in range(model.config.n_layer)]


def grad(t: torch.Tensor) -> torch.Tensor:
    """``t.grad``, which a backward pass has filled."""
    assert t.grad is not None, "no gradient: backward() has not reached this tensor"
    return t.grad


def assert_same_with_gradients(
    got: Sequence[torch.Tensor | None], want: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]
) -> None:
    """``got`` equals ``want`` tensor by tensor (1e-10; a None in got is left out, as its partner),
    and so do their gradients with respect to ``inputs`` (1e-9), taken through one random
    weighting of the outputs; an input got does not reach has gradient 0."""
    import torch

    pairs = [(a, b) for a, b in zip(got, want, strict=True) if a is not None]
    loss_got, loss_want = torch.zeros(()), torch.zeros(())
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        weights = torch.randn_like(b)
        loss_got, loss_want = loss_got + (a * weights).sum(), loss_want + (b * weights).sum()
    ours = torch.autograd.grad(loss_got, inputs, allow_unused=True)
    theirs = torch.autograd.grad(loss_want, inputs, allow_unused=True)
    for a, b in zip(ours, theirs, strict=True):
        assert b is not None, "an input the reference does not reach: leave it out of inputs"
        torch.testing.assert_close(torch.zeros_like(b) if a is None else a, b, rtol=1e-9, atol=1e-9)


class Tolerance(TypedDict):
    """``torch.testing.assert_close(a, b, **tol)``'s tolerances, typed for the checker."""

    rtol: float
    atol: float


def write_suite(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def tiny_train_suite(name: str, train_extra: str = "") -> str:
    """One 2-step softmax training cell on the shipped corpus, suite ``name``; ``train_extra`` adds
    train keys (", precision: bf16")."""
    return f"""
version: 1
name: {name}
experiments:
  - name: t
    kind: train
    variants: [softmax]
    data: {{source: builtin, max_bytes: 50000}}
    models: [{{d_model: 16, n_layer: 1, n_head: 2}}]
    train: {{batch_size: 2, seq_len: 16, budget: {{steps: 2}}, eval_interval: 2, eval_tokens: 64,
            log_interval: 1, checkpoint: false{train_extra}}}
"""


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed `attnbench` console script in a clean subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(["attnbench", *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO)


def drivers(
    n: int, suite: Path, store_path: Path, *extra: str, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess]:
    """``n`` real ``attnbench run`` processes started together on one store (softmax only, one
    thread each, offline), each waited for: their exit codes and output."""
    cmd = ["attnbench", "run", str(suite), "--store", str(store_path), "--device", "cpu", "--no-report", *extra]
    full = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "ATTNBENCH_PLUGINS": "softmax",
        "OMP_NUM_THREADS": "1",
        **(env or {}),
    }
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, cwd=REPO)
        for _ in range(n)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        out.append(subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr))
    return out


def python(code: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
        cwd=cwd,
    )


def fake_distribution(
    tmp_path: Path, name: str, entry_point: str, module_source: str | None = None, module: str | None = None
) -> dict[str, str]:
    """A minimal installed distribution (dist-info with an `attnbench` entry point) on a
    folder we put on PYTHONPATH: the real entry-point loading path, without pip."""
    dist = tmp_path / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    target = module or name.replace("-", "_")
    (dist / "entry_points.txt").write_text(f"[attnbench]\n{entry_point} = {target}\n")
    if module_source is not None:
        (tmp_path / f"{target}.py").write_text(textwrap.dedent(module_source))
    return {"PYTHONPATH": f"{tmp_path}:{REPO}"}
