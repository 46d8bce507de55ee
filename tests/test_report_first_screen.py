"""The report's first screen answers: one sentence per variant with each comparison's decision
(per evaluation setting for task accuracy), speed ratios with intervals and state size, the
quality-against-cost picture, all inside a 1400 x 900 window; published findings checked;
the tuning trail; red problems only for real faults. Built from a synthetic store
(tests/report_store.py), no training."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess

import matplotlib.image as mpimg
import pandas as pd
import pytest

from attnbench.report import write_report
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.store.database import Result
from tests.report_store import DECOY_TEST_LOSS, RECALL_TEST, SEEDS, SUITE, TEXT_TEST, protocol_dict, record, write_store


def _table(report, slug: str):
    return next(t for s in report.sections for t in s.tables if t.slug == slug).data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(load_store(write_store(tmp_path_factory.mktemp("store") / "s.sqlite"), SUITE))


def test_every_comparison_row_ends_in_a_decision_on_the_final_runs(report):
    rows = _table(report, "summary").set_index(["experiment", "variant", "setting"])
    text = rows.loc[("text", "linear", "all test sets")]
    diffs = [a - b for a, b in zip(TEXT_TEST["linear"], TEXT_TEST["softmax"], strict=True)]
    assert text["decision"] == "worse" and text["n"] == len(SEEDS) == 6
    assert text["diff_mean"] == pytest.approx(statistics.fmean(diffs))
    assert text["grid_points"] == 4 and text["margin"] == 0.05  # 4 points tuned; the survivor's final runs report
    assert rows.loc[("text", "softmax", "all test sets"), "value_mean"] == pytest.approx(
        statistics.fmean(TEXT_TEST["softmax"])
    )  # the tuning runs' test losses never enter (they carry DECOY_TEST_LOSS)
    assert rows.loc[("text", "window", "all test sets"), "decision"] == "equivalent"
    # Accuracy: one decision per evaluation setting, where mechanisms differ.
    assert [rows.loc[("recall", "linear", f"num_kv_pairs={k}"), "decision"] for k in (4, 16, 32)] == [
        "equivalent",
        "worse",
        "worse",
    ]
    assert rows.loc[("recall", "window", "num_kv_pairs=32"), "decision"] == "undetermined"
    linear32 = rows.loc[("recall", "linear", "num_kv_pairs=32")]
    assert linear32["diff_mean"] == pytest.approx(
        statistics.fmean(a - b for a, b in zip(RECALL_TEST["linear"][32], RECALL_TEST["softmax"][32], strict=True))
    )
    assert rows.loc[("recall", "linear", "all test sets"), "chosen_point"] == "lr=0.001"  # chosen on validation


def test_the_headline_sentences_say_what_was_found(report):
    head = report.headline
    assert head.notes[0] == (
        "softmax (baseline): text loss 2.110; recall accuracy 0.98 (lr at the grid's lower edge: widen it), "
        "by num_kv_pairs 4 / 16 / 32: 1.00 / 0.98 / 0.96; train step 10 ms at T=256, 100 ms at T=1024; "
        "state 128 KiB"
    )
    linear = next(s for s in head.notes if s.startswith("linear:"))
    # a decided row with no replication round says so before the grid-edge clause
    assert "text loss 2.273 (+0.163 [" in linear
    assert "n=6, exact p=0.0312, worse; not replicated; lr at the grid's upper edge: widen it)" in linear
    assert "recall accuracy 0.71 (-0.269 [" in linear
    assert "by num_kv_pairs 4 / 16 / 32: -0.01 equivalent ±0.05 / -0.26 worse / -0.54 worse" in linear
    # speed reads forward: the baseline's 10 ms against linear's 12.5 ms is 1.25x slower, not "0.80x"
    assert re.search(
        r"train step 1\.25x slower \[1\.2\d, 1\.2\d\] at T=256, 1\.3x faster \[1\.\d+, 1\.\d+\] at T=1024;", linear
    )
    assert "0.8x" not in linear and "slower" in head.method
    assert linear.endswith("state 16.5 KiB")
    window = next(s for s in head.notes if s.startswith("window:"))
    assert "equivalent within ±0.05" in window and "undetermined" in window
    assert len(head.notes) == 3 and str(DECOY_TEST_LOSS) not in " ".join(head.notes)
    assert (
        "text loss ±0.05" in head.method and "recall accuracy ±0.05" in head.method and "two one-sided" in head.method
    )
    assert [f.slug for f in head.figures] == ["tradeoff"]


def test_the_raw_ratio_stays_in_the_tables(report):
    pivot = _table(report, "speedup-pivot").set_index(["mode", "variant"])
    assert pivot.loc[("train_step", "linear"), "T=256"] == pytest.approx(0.010 / 0.0125)  # baseline / variant
    summary = _table(report, "summary").set_index(["experiment", "variant", "setting"])
    assert summary.loc[("text", "linear", "all test sets"), "train_step_speedup"] == pytest.approx(0.100 / 0.077)


def test_a_fallback_path_is_named_beside_its_ratio(tmp_path):
    paths = {"window": {"kernel": "window_attention", "fallback": True}, "linear": {"kernel": "x", "fused": False}}
    head = build_report(load_store(write_store(tmp_path / "s.sqlite", speed_paths=paths), SUITE)).headline
    assert head is not None
    window = next(s for s in head.notes if s.startswith("window:"))
    linear = next(s for s in head.notes if s.startswith("linear:"))
    assert re.search(r"1\.1x slower \[[\d.]+, [\d.]+\] at T=256 \(fallback path\)", window)
    assert "at T=1024 (unfused path)" in linear


def test_choices_on_a_grid_edge_are_flagged_and_counted(report):
    """linear's text lr is the largest of its 4-point grid; every recall lr the smaller of 2;
    softmax's and window's text lr lie inside theirs."""
    head = report.headline
    assert head is not None
    linear = next(s for s in head.notes if s.startswith("linear:"))
    assert "worse; not replicated; lr at the grid's upper edge: widen it)" in linear
    assert "n=6, exact p=0.0312, worse; not replicated; lr at the grid's lower edge: widen it)" in linear  # recall
    window = next(s for s in head.notes if s.startswith("window:"))
    assert "equivalent within ±0.05; not replicated)" in window  # text: inside the grid, no clause
    rows = _table(report, "summary").set_index(["experiment", "variant", "setting"])
    assert rows.loc[("text", "linear", "all test sets"), "grid_edges"] == "lr upper"
    assert rows.loc[("text", "softmax", "all test sets"), "grid_edges"] == ""
    view = next(t for s in report.sections for t in s.tables if t.slug == "summary").view
    assert "lr=0.01 (of 4; upper edge of lr)" in set(view["chosen point (of grid)"])
    edges = [n for n in report.notes if n.kind == "chosen at a grid edge"]
    assert sorted((n.variant, n.where.split()[0], n.what) for n in edges) == [
        ("linear", "recall", "lr at the grid's lower edge"),
        ("linear", "text", "lr at the grid's upper edge"),
        ("softmax", "recall", "lr at the grid's lower edge"),
        ("window", "recall", "lr at the grid's lower edge"),
    ]


def test_each_variant_shows_its_learning_rate_window(report):
    """On the first tuning rung (every lr at 50 steps) each step away from the chosen lr adds 0.1
    to the validation loss: with a 0.05 margin the window is the chosen lr alone."""
    grid = _table(report, "grid").set_index(["experiment", "variant"])
    text = grid.loc[("text", "linear")]
    assert (text["lr_window_lo"], text["lr_window_hi"], text["lr_window_n"]) == (0.01, 0.01, 1)
    assert text["lr_window_basis"] == "tuning rung 0" and text["grid_edges"] == "lr upper"
    assert pd.isna(grid.loc[("recall", "linear"), "lr_window_n"])  # decided on accuracy: no margin on loss


def test_a_wider_margin_widens_the_window(tmp_path):
    from attnbench.report.grid import lr_window, train_selections

    data = load_store(write_store(tmp_path / "s.sqlite"), SUITE)
    sel = next(s for s in train_selections(data) if (s.experiment, s.variant) == ("text", "softmax"))
    protocol = sel.runs["summary"].iloc[0]["protocol"]
    protocol["margin"] = 0.15  # one step either side of the chosen 3e-3 is 0.1 worse
    window = lr_window(data, sel)
    assert window is not None and window.within == (1e-3, 3e-3, 1e-2)
    assert window.text() == "0.001 to 0.01 (3 of 4 learning rates within ±0.15)"


def test_contents_list_only_the_sections_the_suite_has_and_failed_ones_say_so(tmp_path):
    failed = [record(f"sc-{v}", "sc", "scaling", v, 0, {}, {}, {}, status="failed") for v in ("softmax", "linear")]
    index = write_report(write_store(tmp_path / "s.sqlite", failed), SUITE, tmp_path / "out")
    html = index.read_text()
    toc = html[html.index("<nav>") : html.index("</nav>")]
    assert "(missing)" not in toc and "Downstream" not in toc and "Fine-tuning" not in toc
    assert 'Scaling: sc</a> (failed: <a href="#problems">see Problems</a>)' in toc
    assert "Failed: no run of sc finished (2 failed); see Problems" in html
    md = (tmp_path / "out" / "report.md").read_text()
    assert "**Failed: no run of sc finished (2 failed); see Problems** ([Problems](#problems))." in md


def test_published_findings_are_shown_with_what_this_run_found(report):
    found = _table(report, "expectations").set_index(["experiment", "comparison"])["verdict"]
    assert found[("text", "window vs softmax, test loss at all test sets")] == "agrees"
    assert found[("text", "linear vs softmax, test loss at all test sets")] == "disagrees"
    assert found[("recall", "linear vs softmax, test accuracy at num_kv_pairs=32")] == "agrees"
    assert found[("recall", "window vs softmax, test accuracy at num_kv_pairs=32")] == "undetermined"


def test_the_tuning_trail_shows_each_rung_and_what_went_on(report):
    trail = _table(report, "tuning")
    assert set(trail["experiment"]) == {"text"}  # the untuned experiment has no trail
    linear = trail[trail["variant"] == "linear"]
    assert list(linear["rung"]) == [0, 0, 0, 0, 1, 1] and list(linear["budget"]) == ["50 steps"] * 4 + ["100 steps"] * 2
    assert list(linear["went_on"]) == [True, True, False, False, True, False]
    assert linear.iloc[4]["point"] == "lr=0.01"  # the survivor is the point the final runs used


def test_problems_are_faults_and_budget_limits_are_notes(tmp_path):
    index = write_report(write_store(tmp_path / "s.sqlite"), SUITE, tmp_path / "out")
    html = index.read_text()
    assert 'class="ok"' in html and 'class="alarm"' not in html  # a noisy point and a wide fit are no fault
    notes = html[html.index('id="notes"') : html.index("<nav>")]
    assert "noisy speed point: window" in notes and "flagged fit: linear" in notes

    loaded = {
        "mode": "train_step",
        "T": 256,
        "status": "ok",
        "mean_s": 0.01,
        "stddev_s": 0.004,
        "rounds": 5,
        "noisy": True,
        "attempts": 2,
        "noisy_reason": "machine under load (load average 3.10 before, 2.90 after, 2 CPUs)",
    }
    two_seeds = protocol_dict("loss", [], None)
    extra = [
        record("loaded", "speed2", "speed", "softmax", 0, {}, {}, {}, [Result("time_s", 0.01, "s", loaded)]),
        record("failed", "text", "train", "linear", 7, {"lr": 0.01, "stage": "final"}, {}, {}, status="failed"),
        *(
            record(
                f"tiny-{v}-{s}",
                "tiny",
                "train",
                v,
                s,
                {},
                {},
                {"val_loss": 2.0, "test_loss": 2.0 + s / 10, "protocol": two_seeds},
            )
            for v in ("softmax", "linear")
            for s in (0, 1)
        ),
    ]
    index = write_report(write_store(tmp_path / "t.sqlite", extra), SUITE, tmp_path / "out2")
    html = index.read_text()
    problems = html[html.index('id="problems"') : html.index('id="notes"')]
    assert "speed point under load: softmax" in problems and "run: linear" in problems
    assert 'class="alarm"><a href="#problems">2 problem(s)' in html  # said under the title, above the fold
    notes = html[html.index('id="notes"') : html.index("<nav>")]
    assert "few seeds: all — tiny: n=2" in notes and "text:" not in notes  # 3 seeds decide text


LAYOUT_PROBE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
document.body.setAttribute("data-layout", JSON.stringify({
  verdict: [...document.querySelectorAll("#answer table tr")].map(box),
  picture: box(document.querySelector("#answer figure svg")),
  labels: [...document.querySelectorAll('#answer figure svg [id^="tradeoff-label-"]')].map(box),
  width: innerWidth, height: innerHeight}));
</script></body>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install chromium); required when CI is set")
        pytest.skip("chromium is not installed")
    return found


def test_the_first_screen_at_1400_by_900_shows_the_verdict_table_and_the_picture(tmp_path):
    chromium = _chromium()
    index = write_report(write_store(tmp_path / "s.sqlite"), SUITE, tmp_path / "out")
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1400,900",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    # The page allows no script (CSP); a copy without that meta reports where things land.
    page = index.read_text()
    probe = index.with_name("probe.html")
    probe.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", LAYOUT_PROBE)
    )
    dom = subprocess.run([*flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    probed = re.search(r'data-layout="([^"]*)"', dom.stdout)
    assert probed, dom.stdout[-2000:]
    layout = json.loads(probed.group(1).replace("&quot;", '"'))
    # --dump-dom keeps room for the window's frame (innerHeight < 900); the layout depends on the
    # width only, so boxes measured from the top of the page are where a 1400 x 900 viewport shows them.
    assert layout["width"] == 1400
    assert len(layout["verdict"]) == 4  # the header, the baseline's row, then linear and window against it
    for left, top, right, bottom in [*layout["verdict"], layout["picture"]]:
        assert 0 <= left < right <= 1400 and 0 <= top < bottom <= 900
    # Every point's label, as the browser lays out the picture's text, inside the picture and clear of every other.
    labels = layout["labels"]
    assert len(labels) == 12  # three variants, two experiments, two costs
    p_left, p_top, p_right, p_bottom = layout["picture"]
    for i, (left, top, right, bottom) in enumerate(labels):
        assert p_left <= left < right <= p_right and p_top <= top < bottom <= p_bottom
        for other in labels[i + 1 :]:
            assert not (left < other[2] and other[0] < right and top < other[3] and other[1] < bottom), (
                labels[i],
                other,
            )
    # The screenshot of the page itself (CSP on) shows the picture where the probe measured it.
    shot = tmp_path / "first-screen.png"
    proc = subprocess.run([*flags, f"--screenshot={shot}", index.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (900, 1400)
    left, top, right, bottom = (round(v) for v in layout["picture"])
    region = pixels[top:bottom, left:right, :3]
    assert (region.min(axis=2) < 0.6).mean() > 0.01  # drawn: axes, points and labels, not a blank box


def test_labels_of_variants_sharing_a_point_never_overlap():
    """Recall against cost where five variants have not learned and sit at one point, a sixth a
    hair beside them and two learned ones close together: by the renderer's own text extents no
    label covers another, and every variant is named."""
    from itertools import combinations

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from attnbench.report.figures import make_palette
    from attnbench.report.tradeoff import LABEL_ID, draw_tradeoff

    def row(variant: str, value: float, step: float, state: int, unlearned: bool) -> dict:
        return {
            "experiment": "recall",
            "variant": variant,
            "metric": "accuracy",
            "value_mean": value,
            "value_lo": value - 0.02,
            "value_hi": value + 0.02,
            "step_time_s": step,
            "state_bytes": state,
            "unlearned": unlearned,
        }

    shared = [row(v, 0.34, 0.016, 16896, True) for v in ("additive", "heinsen", "linear", "windowed", "gla")]
    rows = pd.DataFrame(
        [
            *shared,
            row("retnet", 0.345, 0.0162, 17000, True),
            row("softmax", 0.94, 0.025, 65536, False),
            row("future", 0.93, 0.026, 65536, False),
        ]
    )
    fig = draw_tradeoff(rows, make_palette(rows["variant"]), 1024)
    assert fig is not None
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    labels = [t for ax in fig.axes for t in ax.texts]
    assert all(str(t.get_gid()).startswith(f"{LABEL_ID}-") for t in labels)
    for variant in rows["variant"]:
        assert sum(variant in t.get_text() for t in labels) == 2  # named once in each cost's panel
    boxes = [Text.get_window_extent(t, canvas.get_renderer()) for t in labels]  # the text alone, not its line
    overlapping = [
        (a.get_text(), b.get_text())
        for (a, x), (b, y) in combinations(zip(labels, boxes, strict=True), 2)
        if x.overlaps(y)
    ]
    assert overlapping == []


def test_a_suite_without_a_speed_experiment_is_told_where_speed_comes_from(tmp_path):
    """The first screen's train-step ratios come from a `kind: speed` experiment: without one it says so."""
    from attnbench.store.database import Store

    protocol = protocol_dict("loss", [], None)
    with Store(tmp_path / "s.sqlite") as store:
        for v, losses in (("softmax", (2.10, 2.12)), ("linear", (2.30, 2.31))):
            for seed, loss in enumerate(losses):
                summary = {"val_loss": loss, "test_loss": loss, "protocol": protocol}
                store.save_run(record(f"text-{v}-{seed}", "text", "train", v, seed, {}, {}, summary))
    head = build_report(load_store(tmp_path / "s.sqlite", SUITE)).headline
    assert head is not None
    assert "a `kind: speed` experiment, and this suite has none that timed a train step" in head.method
    assert not any("train step" in s for s in head.notes)
