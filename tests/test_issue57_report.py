"""Issue 57 items 8, 11-15: `protocol.interval: false` gives per-seed differences and no decision;
the suite's description is shown under the report's title; a variant none of whose cells finished
is headlined "failed" with a link to Problems; no empty timing panel without a speed experiment;
`attnbench inspect` draws negative weights on a diverging scale; the suite reference says what
`retries` does. Synthetic stores (tests/report_store.py), no training except one tiny cell."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from attnbench.report.build import build_report
from attnbench.report.comparison import summary_table
from attnbench.report.load import load_store
from attnbench.report.render import sentence_html, to_html, to_markdown
from attnbench.store.database import Store
from tests.helpers import REPO, run_cli, tiny_train_suite, write_suite
from tests.report_store import SUITE, TEXT_TEST, protocol_dict, record, write_store


def _markdown(report) -> str:
    return to_markdown(report, lambda slug: f"figures/{slug}.png", lambda t: {})


def _html(report) -> str:
    return to_html(report, lambda t: {})


# -- item 8: protocol.interval: false ------------------------------------------------------------
@pytest.fixture(scope="module")
def no_interval(tmp_path_factory):
    path = write_store(tmp_path_factory.mktemp("store") / "s.sqlite")
    with Store(path) as store:  # the text experiment's protocol as a suite with interval: false records it
        store._db.execute(
            "UPDATE runs SET summary = json_set(summary, '$.protocol.interval', json('false')) "
            "WHERE experiment = 'text'"
        )
    return load_store(path, SUITE)


def test_interval_false_shows_per_seed_differences_and_no_decision(no_interval):
    table = summary_table(no_interval)
    assert table is not None
    rows = table.data

    def row(experiment: str, variant: str, setting: str) -> dict:
        found = rows[(rows["experiment"] == experiment) & (rows["variant"] == variant) & (rows["setting"] == setting)]
        return found.iloc[0].to_dict()

    linear = row("text", "linear", "all test sets")
    diffs = [a - b for a, b in zip(TEXT_TEST["linear"], TEXT_TEST["softmax"], strict=True)]
    assert linear["decision"] == "no interval"
    assert linear["diff_mean"] == pytest.approx(sum(diffs) / len(diffs))
    assert linear["diff_lo"] is None or np.isnan(linear["diff_lo"])
    text = linear["decision_text"]
    assert text.endswith(f"n={len(diffs)}, no interval requested (protocol.interval: false)")
    assert "per seed " + ", ".join(f"{d:+.3f}" for d in diffs) in text
    assert "worse" not in text and "[" not in text
    # the recall experiment asked for intervals: its decisions are unchanged
    assert row("recall", "linear", "num_kv_pairs=32")["decision"] == "worse"


def test_interval_false_reaches_the_first_screen(no_interval):
    report = build_report(no_interval)
    assert report.headline is not None
    linear = next(n for n in report.headline.notes if n.startswith("linear:"))
    text_part = linear.split("; recall")[0]
    assert "no interval requested (protocol.interval: false)" in text_part
    assert "worse" not in text_part and "undetermined" not in text_part and "decided" not in text_part


# -- item 11: the suite's description ---------------------------------------------------------------
def test_the_suites_description_is_shown_under_the_reports_title(tmp_path):
    body = tiny_train_suite("described").replace(
        "name: described\n", "name: described\ndescription: 'Softmax on <Shakespeare>: a smoke run'\n"
    )
    suite = write_suite(tmp_path / "d.yaml", body)
    store = tmp_path / "store.sqlite"
    done = run_cli("run", str(suite), "--store", str(store), "--device", "cpu", env={"ATTNBENCH_PLUGINS": "softmax"})
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "reports" / "described"
    md = (folder / "report.md").read_text().splitlines()
    assert md[0] == "# attnbench report: described"
    assert md[2] == "*Softmax on &lt;Shakespeare&gt;: a smoke run*"
    page = (folder / "index.html").read_text()
    title = '<h1>attnbench report: described</h1><p class="description">'
    assert title + "Softmax on &lt;Shakespeare&gt;: a smoke run</p>" in page


def test_a_report_without_a_recorded_description_shows_none(tmp_path):
    report = build_report(load_store(write_store(tmp_path / "s.sqlite"), SUITE))
    assert report.description == ""
    assert 'class="description"' not in _html(report)


# -- item 12: a variant none of whose cells finished ----------------------------------------------------
@pytest.fixture(scope="module")
def with_failed_probe(tmp_path_factory):
    protocol = protocol_dict("loss", [], None)
    extra = []
    for seed in (0, 1, 2):
        run = record(
            f"text-probe-{seed}",
            "text",
            "train",
            "probe",
            seed,
            {"lr": 1e-3, "stage": "final"},
            {"train": {"budget": {"steps": 400}}},
            {"protocol": protocol},
            status="failed",
        )
        run.error = "RuntimeError: boom"
        extra.append(run)
    return build_report(load_store(write_store(tmp_path_factory.mktemp("store") / "s.sqlite", extra), SUITE))


def test_a_variant_whose_every_cell_failed_is_headlined_failed(with_failed_probe):
    report = with_failed_probe
    assert report.headline is not None
    probe = next(n for n in report.headline.notes if n.startswith("probe:"))
    assert probe == "probe: text failed: no seed finished (seeds failed; see Problems)"
    assert "no paired seeds" not in probe and "undetermined" not in probe
    html = sentence_html(probe)
    assert '<b class="failed">failed</b>' in html and '<a href="#problems">see Problems</a>' in html
    assert '<a href="#problems">see Problems</a>' in _html(report)
    assert "- probe: text failed: no seed finished (seeds failed; see [Problems](#problems))" in _markdown(report)
    assert any(p.variant == "probe" for p in report.problems)  # the cells it links to
    linear = next(n for n in report.headline.notes if n.startswith("linear:"))
    assert "failed" not in linear  # the others read as before


# -- item 13: no speed experiment ------------------------------------------------------------------
def _png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


def test_without_a_speed_experiment_there_is_no_timing_panel_and_the_caption_says_why(tmp_path):
    path = write_store(tmp_path / "s.sqlite")
    timed = build_report(load_store(path, SUITE)).headline
    with Store(path) as store:
        store._db.execute("DELETE FROM runs WHERE kind IN ('speed', 'speed_fit')")
    untimed = build_report(load_store(path, SUITE)).headline
    assert timed is not None and untimed is not None
    (with_speed,), (without,) = timed.figures, untimed.figures
    assert "no speed experiment in this suite" in without.caption
    assert "no speed experiment" not in with_speed.caption
    # one panel per experiment (decode state) instead of two: a narrower picture, the same height
    (w1, h1), (w2, h2) = _png_size(with_speed.png), _png_size(without.png)
    assert w2 < 0.7 * w1 and abs(h2 - h1) <= 2


# -- item 14: negative attention weights --------------------------------------------------------------
def test_negative_weights_are_drawn_on_a_diverging_scale_centred_at_zero():
    import matplotlib.pyplot as plt

    from attnbench.explain.maps import LayerMap
    from attnbench.explain.render import _figure

    tokens = list("abcd")
    rng = np.random.default_rng(0)
    weights = np.tril(rng.uniform(-0.3, 1.0, size=(2, 4, 4)))
    weights[0, 3, 0] = -0.5
    for kind, w in (("pairwise", weights), ("importance", weights[:, 3, :])):
        fig = _figure(LayerMap(0, kind, w), tokens)
        try:
            mesh = fig.axes[0].collections[0]
            limits: tuple = (mesh.norm.vmin, mesh.norm.vmax)  # matplotlib types them loosely
            vmin, vmax = float(limits[0]), float(limits[1])
            assert vmin < 0 and vmin == pytest.approx(-vmax), (kind, vmin, vmax)
            assert vmin <= w.min()
            cmap = mesh.get_cmap()  # diverging: blue below 0, white at 0, red above
            low, mid, high = cmap(0.0), cmap(0.5), cmap(1.0)
            assert low[2] > low[0] and high[0] > high[2] and min(mid[:3]) > 0.9, (low, mid, high)
        finally:
            plt.close(fig)
    fig = _figure(LayerMap(0, "pairwise", np.abs(weights)), tokens)  # all non-negative: as before
    try:
        mesh = fig.axes[0].collections[0]
        assert mesh.norm.vmin == 0.0 and mesh.get_cmap().name == "viridis"
    finally:
        plt.close(fig)


# -- item 15: the suite reference on retries -------------------------------------------------------------
def test_the_reference_says_retries_apply_to_the_local_pool_too():
    text = (REPO / "docs" / "suite-reference.md").read_text()
    line = next(row for row in text.splitlines() if row.startswith("| `retries` |"))
    assert "local pool (`--jobs N`)" in line and "--executor ray" in line
    assert "Fan-out executors" not in line and "CPUs each cell" not in line
    description = next(row for row in text.splitlines() if row.startswith("| `description` |"))
    assert "under the report's title" in description
    schema = json.loads((REPO / "docs" / "suite.schema.json").read_text())
    assert "retries" in schema["properties"]
