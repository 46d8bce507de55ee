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
import pytest

from attnbench.report import write_report
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.store.database import Result
from tests.report_store import DECOY_TEST_LOSS, RECALL_TEST, SUITE, TEXT_TEST, protocol_dict, record, write_store


def _table(report, slug: str):
    return next(t for s in report.sections for t in s.tables if t.slug == slug).data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(load_store(write_store(tmp_path_factory.mktemp("store") / "s.sqlite"), SUITE))


def test_every_comparison_row_ends_in_a_decision_on_the_final_runs(report):
    rows = _table(report, "summary").set_index(["experiment", "variant", "setting"])
    text = rows.loc[("text", "linear", "all test sets")]
    diffs = [a - b for a, b in zip(TEXT_TEST["linear"], TEXT_TEST["softmax"], strict=True)]
    assert text["decision"] == "worse" and text["n"] == 3
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
        "softmax (baseline): text loss 2.110; recall accuracy 0.98, by num_kv_pairs 4 / 16 / 32: "
        "1.00 / 0.98 / 0.96; train step 10 ms at T=256, 100 ms at T=1024; state 128 KiB"
    )
    linear = next(s for s in head.notes if s.startswith("linear:"))
    assert "text loss 2.273 (+0.163 [" in linear and "n=3, worse)" in linear
    assert "recall accuracy 0.71 (-0.269 [" in linear
    assert "by num_kv_pairs 4 / 16 / 32: -0.01 equivalent ±0.05 / -0.26 worse / -0.54 worse" in linear
    assert re.search(r"train step 0\.80x \[0\.\d\d, 0\.\d\d\] at T=256, 1\.30x \[1\.\d\d, 1\.\d\d\] at T=1024", linear)
    assert linear.endswith("state 16.5 KiB")
    window = next(s for s in head.notes if s.startswith("window:"))
    assert "equivalent within ±0.05" in window and "undetermined" in window
    assert len(head.notes) == 3 and str(DECOY_TEST_LOSS) not in " ".join(head.notes)
    assert "text loss ±0.05" in head.intro and "recall accuracy ±0.05" in head.intro and "two one-sided" in head.intro
    assert [f.slug for f in head.figures] == ["tradeoff"]


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
  sentences: [...document.querySelectorAll("#answer li")].map(box),
  picture: box(document.querySelector("#answer figure img")),
  width: innerWidth, height: innerHeight}));
</script></body>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install chromium); required when CI is set")
        pytest.skip("chromium is not installed")
    return found


def test_the_first_screen_at_1400_by_900_shows_every_sentence_and_the_picture(tmp_path):
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
    assert len(layout["sentences"]) == 3  # the baseline's values, then linear and window against it
    for left, top, right, bottom in [*layout["sentences"], layout["picture"]]:
        assert 0 <= left < right <= 1400 and 0 <= top < bottom <= 900
    # The screenshot of the page itself (CSP on) shows the picture where the probe measured it.
    shot = tmp_path / "first-screen.png"
    proc = subprocess.run([*flags, f"--screenshot={shot}", index.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (900, 1400)
    left, top, right, bottom = (round(v) for v in layout["picture"])
    region = pixels[top:bottom, left:right, :3]
    assert (region.min(axis=2) < 0.6).mean() > 0.01  # drawn: axes, points and labels, not a blank box
