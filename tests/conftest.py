"""Test isolation: offline hub, caches in temp folders, small thread count."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_CACHE = Path(tempfile.mkdtemp(prefix="attnbench-test-cache-"))
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
for _key, _value in {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HOME": str(_CACHE / "hf"),
    "MPLCONFIGDIR": str(_CACHE / "mpl"),
    "PIP_CACHE_DIR": str(_CACHE / "pip"),
}.items():
    os.environ.setdefault(_key, _value)

# Under pytest-xdist each worker gets its share of the cores, set before torch is imported so
# its intra-op pool (and that of every `attnbench` subprocess a test starts) is that size: two
# workers at two threads each on a 2-core CI machine would only fight over the cores.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_key, _THREADS)

# `attnbench run` defaults to one worker process per core; the tests run cells in process
# (one spawned pool per CLI run would cost seconds each) unless a test asks for --jobs.
os.environ.setdefault("ATTNBENCH_JOBS", "1")

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
