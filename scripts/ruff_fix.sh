#!/usr/bin/env bash
# The mechanical part of keeping ruff clean: its automatic (safe) lint fixes, then the formatter.
# What `ruff check .` still reports afterwards is for a person to fix. Config: pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check --fix --exit-zero .
ruff format .
