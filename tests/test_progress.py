"""The progress line: step/total, tokens/s, train and val loss, ETA of the cell and the
suite; plain periodic lines when output is not a terminal (a mocked clock, not timing)."""

from __future__ import annotations

import io

from attnbench.plan.suite import load_suite
from attnbench.run.progress import PLAIN_INTERVAL_S, ProgressLine, cell_label
from tests.helpers import python, run_cli, write_suite

SUITE = """
version: 1
name: prog
experiments:
  - name: text
    kind: train
    variants: [softmax]
    models: [{d_model: 32, n_layer: 1, n_head: 2}]
    train: {budget: {steps: 100}, batch_size: 4, seq_len: 32, checkpoint: false}
  - name: fast
    kind: speed
    variants: [softmax]
    models: [{d_model: 32, n_layer: 1, n_head: 2}]
    speed: {lengths: [16, 32], modes: [forward]}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_with_throughput_losses_and_etas(tmp_path):
    from attnbench import get_plugin_manager, load_registry
    from attnbench.experiments.registry import expand_suite

    cells = expand_suite(load_suite(write_suite(tmp_path / "p.yaml", SUITE)), load_registry(get_plugin_manager()))
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, clock=clock)
    update = line.cell(1, 2, cells[0])
    clock.now = 1.0
    update(10, 100, 2.5)  # within the plain interval of the start: nothing printed
    clock.now = PLAIN_INTERVAL_S + 1
    update(25, 100, 2.25, val=2.4)
    clock.now = 2 * PLAIN_INTERVAL_S + 2
    update(100, 100, 2.0)  # the last step always prints
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/2] text softmax d32x1 seed 0")
    tokens_per_s = 25 * 4 * 32 / (PLAIN_INTERVAL_S + 1)
    assert lines[1] == (
        f"[1/2] step 25/100 | {tokens_per_s:,.0f} tok/s | loss 2.2500 | val 2.4000 | ETA cell 0m48s, suite ?"
    )
    assert lines[2].startswith("[1/2] step 100/100") and "val 2.4000" in lines[2] and "ETA cell 0m00s" in lines[2]
    speed = line.cell(2, 2, cells[1])
    clock.now += PLAIN_INTERVAL_S + 1
    speed(1, 2, None, label="forward T=16")
    assert out.getvalue().splitlines()[-1].startswith("[2/2] step 1/2 | forward T=16 | ETA cell")


def test_the_label_names_the_grid_point_and_the_options_set(tmp_path):
    from attnbench import get_plugin_manager, load_registry
    from attnbench.experiments.registry import expand_suite

    grid = (
        SUITE.split("  - name: fast")[0].replace("variants: [softmax]", "variants: [softmax, windowed]")
        + "    grid: {lr: [2.0e-3, 1.0e-2]}\n    variant_options: {windowed: {windows: [8], rescale: 10.0}}\n"
    )
    cells = expand_suite(load_suite(write_suite(tmp_path / "g.yaml", grid)), load_registry(get_plugin_manager()))
    labels = [cell_label(i, len(cells), c) for i, c in enumerate(cells, 1)]
    assert labels == [
        "[1/4] text softmax d32x1 seed 0 lr=2e-3",
        "[2/4] text softmax d32x1 seed 0 lr=0.01",
        "[3/4] text windowed d32x1 seed 0 lr=2e-3 windows=8",
        "[4/4] text windowed d32x1 seed 0 lr=0.01 windows=8",
    ]


def test_run_says_where_the_gate_verdict_came_from(tmp_path):
    suite = write_suite(tmp_path / "p.yaml", SUITE.replace("steps: 100", "steps: 3").split("  - name: fast")[0])
    args = ("run", str(suite), "--store", str(tmp_path / "s.sqlite"), "--no-report")
    first = run_cli(*args, env={"ATTNBENCH_PLUGINS": "softmax"})
    assert first.returncode == 0 and "trust gate softmax: passed (checks ran now)" in first.stderr, first.stderr
    second = run_cli(*args, "--set", "experiments.text.seeds=[1]", env={"ATTNBENCH_PLUGINS": "softmax"})
    assert "trust gate softmax: passed (verdict cached in the store for this code)" in second.stderr


def test_third_party_bars_are_switched_off_without_importing_their_libraries():
    """`attnbench run` silences datasets' bars through its environment switch (read when
    datasets is first imported), and tells an already-imported datasets directly."""
    proc = python(
        """
        import os, sys
        for key in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
            os.environ.pop(key, None)
        from attnbench.run.progress import silence_third_party_bars
        silence_third_party_bars()
        imported_by_silencing = "datasets" in sys.modules
        import datasets
        print(imported_by_silencing, datasets.utils.are_progress_bars_disabled())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
    late = python(
        """
        import os
        os.environ.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
        import datasets
        datasets.enable_progress_bars()
        from attnbench.run.progress import silence_third_party_bars
        silence_third_party_bars()
        print(datasets.utils.are_progress_bars_disabled())
        """
    )
    assert late.returncode == 0, late.stderr
    assert late.stdout.split() == ["True"]
