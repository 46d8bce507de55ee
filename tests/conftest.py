"""Test isolation: offline hub, caches in temp folders, small thread count."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_CACHE = Path(tempfile.mkdtemp(prefix="attnbench-test-cache-"))
for _key, _value in {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HOME": str(_CACHE / "hf"),
    "MPLCONFIGDIR": str(_CACHE / "mpl"),
    "PIP_CACHE_DIR": str(_CACHE / "pip"),
}.items():
    os.environ.setdefault(_key, _value)

import pytest  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def registry():
    """A fresh plugin manager and registry for this test (installed entry points)."""
    from attnbench import get_plugin_manager, load_registry

    return load_registry(get_plugin_manager())


@pytest.fixture
def store(tmp_path):
    """A temporary results store, open for this test."""
    from attnbench.store.database import Store

    with Store(tmp_path / "store.sqlite") as opened:
        yield opened
