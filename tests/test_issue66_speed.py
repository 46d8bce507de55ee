"""Issue 66, speed: a forked speed point killed by SIGKILL (the OOM killer, or a kill -9) is
stored as "killed", not assumed out of memory, its cell as failed, and the next run measures it
again (before: stored as "oom", the longer lengths "skipped", and a re-run measured nothing)."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn

from attnbench import Variant, hookimpl
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests.helpers import write_suite

MARKER = "ATTNBENCH_TEST_KILL_ONCE"


class KilledOnce(nn.Module):
    """A token-wise projection whose process (a speed point's, never the driver's: the trust gate
    runs it there) is killed (SIGKILL) the first time it sees T > 16."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        marker, driver = os.environ.get(MARKER), os.environ.get(MARKER + "_DRIVER")
        if x.size(1) > 16 and marker and str(os.getpid()) != driver and not os.path.exists(marker):
            Path(marker).write_text("killed once")
            os.kill(os.getpid(), signal.SIGKILL)
        return self.proj(x)  # (B, T, D)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(Variant(name="killed-once", build_mixer=KilledOnce, description="killed once above T=16"))


SUITE = """
version: 1
name: speed-killed
device: cpu
allow_failed_checks: true
check_time_limit_s: 5
defaults:
  model: {d_model: 32, n_layer: 1, n_head: 2}
experiments:
  - name: sp
    kind: speed
    variants: [killed-once]
    speed: {lengths: [16, 32, 64], modes: [forward], min_rounds: 2, max_time: 0.05, threads: 1}
"""


def test_a_killed_speed_point_is_stored_as_killed_and_measured_again_on_resume(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(MARKER, str(tmp_path / "killed"))
    monkeypatch.setenv(MARKER + "_DRIVER", str(os.getpid()))
    registry = load_registry(get_plugin_manager([("killtest", sys.modules[__name__])], entry_points=False))
    suite = load_suite(write_suite(tmp_path / "s.yaml", SUITE))
    with Store(tmp_path / "s.sqlite") as store:
        first = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        (run,) = store.runs(kind="speed")
        status = {r["tags"]["T"]: r["tags"]["status"] for r in store.results(run["id"]) if r["name"] == "time_s"}
        assert status == {16: "ok", 32: "killed", 64: "skipped"}
        assert run["status"] == "failed" and "forward T=32 killed by SIGKILL" in run["error"]
        assert len(first.not_done) == 1
        again = run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert again.ran == 1 and again.not_done == []  # measured again
        (run,) = store.runs(kind="speed")
        status = {r["tags"]["T"]: r["tags"]["status"] for r in store.results(run["id"]) if r["name"] == "time_s"}
        assert run["status"] == "done" and set(status.values()) == {"ok"}
