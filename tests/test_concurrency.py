"""Several drivers on one store (the README's promise): with a training state written every
step, every cell ends `done`, none is stored twice, and every driver exits 0."""

from __future__ import annotations

import shutil

from attnbench.store.database import Store
from tests.helpers import drivers, write_suite

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
SUITE = """
    version: 1
    name: shared
    defaults:
      data: {source: builtin, max_bytes: 60000}
      model: {d_model: 16, n_layer: 1, n_head: 2}
      train: {batch_size: 2, seq_len: 16, lr: 1.0e-2, warmup_steps: 1, eval_interval: 6, eval_tokens: 256,
              log_interval: 2, checkpoint_interval: 1}
    experiments:
      - name: cells
        kind: train
        variants: [softmax]
        train: {budget: {steps: 6}}
        seeds: [0, 1, 2]
"""


def test_drivers_sharing_a_store_lose_and_duplicate_nothing(tmp_path):
    """Three drivers on one store, five times over (three contend more than two would)."""
    n = 3
    suite = write_suite(tmp_path / "shared.yaml", SUITE)
    base = tmp_path / "base.sqlite"  # after the first repeat: its gate verdicts, no cells
    for repeat in range(5):
        store_path = tmp_path / f"r{repeat}" / "store.sqlite"
        store_path.parent.mkdir()
        if base.exists():
            shutil.copy(base, store_path)
        for proc in drivers(n, suite, store_path):
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert "Traceback" not in proc.stderr
        with Store(store_path) as store:
            runs = store.runs()
            assert sorted(r["seed"] for r in runs) == [0, 1, 2]  # one row per cell: none lost, none twice
            assert all(r["status"] == "done" for r in runs), [(r["status"], r["error"]) for r in runs]
            assert store.attempts() == []  # no driver recorded a spurious failure
        leftovers = [p.name for p in store_path.parent.rglob("*.tmp")]
        assert leftovers == []
        if not base.exists():  # later repeats skip the trust gate, as a user's second run does
            with Store(store_path) as store:
                store._db.execute("DELETE FROM runs")
                store._db.execute("VACUUM INTO ?", (str(base),))
