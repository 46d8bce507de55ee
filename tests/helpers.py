"""Small helpers shared by tests (not fixtures: plain functions)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_suite(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed `attnbench` console script in a clean subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(["attnbench", *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=REPO)


def python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=300)
