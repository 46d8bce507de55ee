"""Live tracking: a tracker with `log_points` gets each training curve point while its cell
runs (before the store holds the cell), and `log_cell` then gets only what it missed, so a
tracker's copy of the curve has every point once."""

from __future__ import annotations

from attnbench import get_plugin_manager, load_registry
from attnbench.plan.suite import load_suite
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests.helpers import write_suite
from tests.test_tracking import SUITE


class LiveRecorder:
    def __init__(self, store_path):
        self.store_path, self.live, self.final = store_path, [], []

    def log_points(self, cell, metrics):
        with Store(self.store_path) as store:  # what the store holds while the point arrives
            stored = len(store.runs())
        self.live.append((cell["experiment"], cell["status"], stored, [(m.name, m.step) for m in metrics]))

    def log_cell(self, cell, metrics, results):
        self.final.append((cell["status"], [(m.name, m.step) for m in metrics], {r.name for r in results}))

    def close(self):
        pass


def test_curve_points_reach_a_live_tracker_while_the_cell_runs(tmp_path):
    suite = load_suite(write_suite(tmp_path / "tracked.yaml", SUITE))
    recorder = LiveRecorder(tmp_path / "s.sqlite")
    with Store(tmp_path / "s.sqlite") as store:
        run_suite(
            suite,
            store,
            load_registry(get_plugin_manager()),
            device="cpu",
            only_variants=["softmax"],
            trackers=[recorder],
        )
        stored = sorted((m["name"], m["step"]) for m in store.metrics(store.runs()[0]["id"]))
    # 12 steps logged every 3, evaluated every 6: four log points, each sent as it happened
    assert [step for *_, points in recorder.live for _, step in points[:1]] == [3, 6, 9, 12]
    assert all(exp == "text" and status == "running" and n_stored == 0 for exp, status, n_stored, _ in recorder.live)
    sent = sorted(p for *_, points in recorder.live for p in points)
    assert sent == stored and len(set(sent)) == len(sent)  # every stored point, each once
    [(status, missed, results)] = recorder.final
    assert status == "done" and missed == [] and {"loss", "bpb", "ppl"} <= results
