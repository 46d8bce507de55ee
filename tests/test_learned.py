"""Learned before compared, through `attnbench report` on a hand-made store: a baseline at
chance makes no decision ("baseline not learned (softmax 0.25, guessing 0.25)") in the first
screen, the summary table and the published-findings table; a variant at the bigram level on
text gets no decision either; the null levels stand beside the losses."""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.cli import main
from attnbench.report.floors import Floor, text_floor, text_floors_text
from attnbench.report.learned import LEARNED, NOT_LEARNED, SPLIT, UNKNOWN, learned
from attnbench.store.database import Result, Store
from tests.report_store import protocol_dict, record

SUITE = "chance"
SEEDS = (0, 1, 2)
PAIRS = (4, 8)
GUESS = {4: 0.25, 8: 0.125}  # mqar: 1/K
ANSWERS = 512.0  # answers scored per test set: the n behind each seed's exact test against the null
# Test accuracy per seed at each K: softmax at chance everywhere, linear learned at K=4 only.
RECALL = {
    "softmax": {4: (0.26, 0.24, 0.27), 8: (0.12, 0.13, 0.11)},
    "linear": {4: (0.60, 0.62, 0.65), 8: (0.13, 0.12, 0.125)},
}
TEXT = {"softmax": (2.10, 2.12, 2.11), "linear": (2.50, 2.52, 2.49)}  # linear not below the bigram
STATE = {"softmax": 4096, "linear": 1024}
FLOORS = {"unigram": 3.36, "bigram": 2.45, "trigram": 2.10, "4gram": 1.90}  # nats/token (bytes: bits/byte = / ln 2)
TARGETS = "0123456789abcdef"  # the evaluation windows' fingerprint: the floors and the model share their targets
EXPECT = [
    {
        "claim": "linear recalls fewer pairs",
        "source": "Zoology",
        "variant": "linear",
        "versus": None,
        "outcome": "worse",
        "setting": {"num_kv_pairs": 8},
    }
]


def _recall(v: str, seed: int, i: int) -> tuple[dict, list[Result]]:
    results = []
    for k in PAIRS:
        tags = {"split": "test", "task": "mqar", "num_kv_pairs": k}
        results += [
            Result("accuracy", RECALL[v][k][i], "", tags),
            Result("guess_accuracy", GUESS[k], "", tags),
            Result("answers", ANSWERS, "count", tags),
        ]
    acc = sum(RECALL[v][k][i] for k in PAIRS) / len(PAIRS)
    summary = {
        "val_loss": 2.0,
        "test_loss": 2.0,
        "state_elements": STATE[v],
        "test_accuracy": acc,
        "test_guess_accuracy": sum(GUESS.values()) / len(GUESS),
        "test_answers_total": ANSWERS * len(PAIRS),
        "val_guess_accuracy": sum(GUESS.values()) / len(GUESS),
        "floor_method": "declared: uniform over the K distinct values shown in the pairs",
        "protocol": protocol_dict("accuracy", EXPECT, None),
    }
    return summary, results


def _text(v: str, i: int) -> dict:
    floors = {
        f"{s}_floor_{o}_{u}": x * (1 if u == "loss" else 1.4427)
        for o, x in FLOORS.items()
        for s in ("val", "test")
        for u in ("loss", "bpb")
    }
    return {
        "val_loss": TEXT[v][i],
        "state_elements": STATE[v],
        "test_loss": TEXT[v][i],
        **floors,
        **{f"{s}_{kind}": TARGETS for s in ("val", "test") for kind in ("targets", "floor_targets")},
        "floor_method": "unigram add-one; bigram to 4-gram interpolated Kneser-Ney",
        "protocol": protocol_dict("loss", [], None),
    }


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "s.sqlite"
    config = {
        "data": {"source": "task", "task": "mqar", "eval_settings": [{"num_kv_pairs": k} for k in PAIRS]},
        "train": {"budget": {"steps": 300}},
    }
    with Store(path) as store:
        for v in RECALL:
            for i, seed in enumerate(SEEDS):
                summary, results = _recall(v, seed, i)
                store.save_run(
                    record(
                        f"r-{v}-{seed}", "recall", "train", v, seed, {"lr": 1e-3}, config, summary, results, suite=SUITE
                    )
                )
                text = {"train": {"budget": {"steps": 600}}}
                store.save_run(
                    record(f"t-{v}-{seed}", "text", "train", v, seed, {"lr": 1e-3}, text, _text(v, i), suite=SUITE)
                )
    folder = tmp_path_factory.mktemp("out") / "report"
    assert main(["report", "--store", str(path), "--suite", SUITE, "--out", str(folder)]) == 0
    return folder


def _summary(out) -> dict[tuple[str, str, str], dict]:
    rows = pd.read_parquet(out / "tables" / "summary.parquet").to_dict("records")
    return {(str(r["experiment"]), str(r["variant"]), str(r["setting"])): r for r in rows}


def test_a_baseline_at_chance_yields_not_learned_and_no_decision(out):
    rows = _summary(out)
    for setting in ("all test sets", "num_kv_pairs=4", "num_kv_pairs=8"):
        row = rows[("recall", "linear", setting)]
        assert row["decision"] == "baseline not learned"  # the code names whose seeds stopped it
        assert row["decision_text"].startswith("baseline not learned (softmax ")
    assert rows[("recall", "linear", "num_kv_pairs=4")]["decision_text"] == (
        "baseline not learned (softmax 0.257, null 0.250, 0 of 3 seeds beyond it)"
    )
    assert rows[("recall", "softmax", "all test sets")]["learned"] == NOT_LEARNED
    assert rows[("recall", "linear", "num_kv_pairs=4")]["learned"] == LEARNED
    assert rows[("recall", "linear", "num_kv_pairs=8")]["learned"] == NOT_LEARNED
    # Text: softmax learned (below the bigram), linear at 2.50 is not: no decision either.
    text = rows[("text", "linear", "all test sets")]
    assert (
        text["decision"] == "not learned"
        and text["decision_text"] == "not learned (linear 2.503, bigram 2.450, 0 of 3 seeds beyond it)"
    )
    assert text["floors"].startswith(
        "unigram 3.360 / bigram 2.450 / trigram 2.100 / 4gram 1.900 nats/token (4.85 / 3.53 / 3.03 / 2.74"
    )


def test_the_first_screen_and_the_findings_say_not_learned(out):
    md = (out / "report.md").read_text(encoding="utf-8").replace("\\", "")  # Markdown escapes
    assert "recall accuracy 0.37 (baseline not learned (softmax 0.188, null 0.188, 0 of 3 seeds beyond it))" in md
    assert (
        "by num_kv_pairs 4 / 8: +0.37 baseline not learned / +0.01 baseline not learned "
        "[baseline not learned at this budget]" in md
    )
    assert (
        "text loss 2.503 (not learned (linear 2.503, bigram 2.450, 0 of 3 seeds beyond it)) "
        "[not learned at this budget; below the trigram (2.100) on 0 of 3 seeds, below the 4gram (1.900) on 0 of 3 "
        "seeds]" in md
    )
    # softmax's own text loss, in the baseline's sentence, and where it stands against the trigram and 4-gram
    assert (
        "[learned: beyond bigram 2.450; below the trigram (2.100) on 0 of 3 seeds, below the 4gram (1.900) on 0 of 3 "
        "seeds]" in md
    )
    assert "(null 0.25 / 0.12) [not learned at this budget: null 0.19]" in md
    assert " better" not in md.split("## ")[1] and " worse" not in md.split("## ")[1]  # no decision on the first screen
    found = pd.read_parquet(out / "tables" / "expectations.parquet")
    assert list(found["verdict"]) == ["not testable at this budget"]
    assert "Null levels (val split" in md  # beside the held-out losses of the training section


ACC = Floor("guessing", 0.25, True)


@pytest.mark.parametrize(
    "values, floor, answers, status",
    [
        ((0.26, 0.24, 0.27), ACC, 512, NOT_LEARNED),  # no seed's answers beyond the floor (exact binomial)
        ((0.26, 0.24, 0.27), ACC, None, SPLIT),  # no counts: the values alone, on both sides of it
        ((0.60, 0.62, 0.65), ACC, 512, LEARNED),
        ((0.97, 0.33, 0.34), Floor("null", 0.333, True), 512, SPLIT),  # a circuit formed on one seed of three
        ((0.20,), ACC, 512, NOT_LEARNED),
        ((0.90,), ACC, 512, LEARNED),  # one seed, far beyond it
        ((2.10, 2.12, 2.11), Floor("bigram", 2.45, False), None, LEARNED),  # lower is better
        ((2.46, 2.47, 2.45), Floor("bigram", 2.45, False), None, NOT_LEARNED),
        ((2.44, 2.46, 2.45), Floor("bigram", 2.45, False), None, SPLIT),
        ((0.5, 0.6), None, None, UNKNOWN),  # no floor stored
    ],
)
def test_each_seed_is_judged_against_the_floor(values, floor, answers, status):
    counts = None if answers is None else {s: float(answers) for s in range(len(values))}
    got = learned(dict(enumerate(values)), floor, counts)
    assert got.status == status


def test_a_text_floor_stands_beside_the_model_only_on_the_same_targets():
    """A stored floor counts only where its targets fingerprint is the model's own: a summary
    without fingerprints (stores from before), or with another one, has no text floor."""
    matched = _text("linear", 0)
    assert text_floor([matched], "bigram") == pytest.approx(FLOORS["bigram"])
    assert text_floor([matched], "4gram") == pytest.approx(FLOORS["4gram"])
    older = {k: v for k, v in matched.items() if not k.endswith("targets")}
    other = {**matched, "test_floor_targets": "fedcba9876543210"}
    for summary in (older, other):
        assert text_floor([summary], "bigram") is None and text_floors_text([summary], "test") is None
