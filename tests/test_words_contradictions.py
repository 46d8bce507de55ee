"""No row of a report says two things about itself (issue 67 item 2). Every word a built report
prints about a row (its summary.csv decision, decision_text and learned columns, its Summary
cell, its verdict cell or per-setting word, its first-screen sentence with the bracket of what
the budget's numbers mean, the time-to-learn sentence's head over its experiment) is read back
into claims: which learned state the row's own seeds are in (every seed / k of n / none), and
whether its comparison was decided, undetermined, or stopped by a learned state. A row fails
when two of its claims cannot both hold.

The store covers every learned state: a baseline at chance against a variant that learned on 2
of 3 seeds (the issue's stick-breaking row: 447 / 1536 and 593 / 1536 against a 0.258 null) and
one that learned on none; a baseline that learned against variants that learned on every seed
(undetermined at 3 seeds), on some and on none; a baseline whose seeds split against a variant
that learned on every seed."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from attnbench.decision_words import (
    BASELINE,
    BASELINE_NOT_LEARNED,
    BASELINE_NOT_LEARNED_AT_BUDGET,
    BASELINE_SPLIT,
    DECIDED,
    DECIDED_ON_SHARE,
    DECIDED_WHERE_LEARNED,
    LEARNED,
    NO_FINAL_DECISION,
    NOT_COMPARED,
    NOT_LEARNED,
    SPLIT,
    STATE_WORDS,
    UNDETERMINED,
    UNDETERMINED_AT,
    learned_state,
)
from attnbench.report.build import build_report
from attnbench.report.load import load_store
from attnbench.store.database import Metric, Result, Store
from tests.report_store import protocol_dict, record

SUITE = "words"
NULL = 0.258  # the best binding-free predictor's accuracy
ANSWERS = 1536.0  # scored answers per test set: a seed at 0.291 (447 / 1536) is beyond the null (p 0.002)
PAIRS = (4, 8)
AT_CHANCE = (0.25, 0.255, 0.26)
# Test accuracy per seed (the same at each number of pairs), per experiment and variant; softmax is the baseline.
ACCURACY = {
    "count": {"softmax": AT_CHANCE, "stick": (447 / 1536, 0.26, 593 / 1536), "linear": AT_CHANCE},
    "recall": {
        "softmax": (0.95, 0.96, 0.97),
        "window": (0.93, 0.97, 0.95),  # learned on every seed: undetermined at 3 paired seeds
        "stick": (0.95, 0.26, 0.94),
        "linear": AT_CHANCE,
    },
    "copy": {"softmax": (0.95, 0.26, 0.96), "window": (0.90, 0.92, 0.95), "linear": AT_CHANCE},
}
OVERALL = "all test sets"


def _run(exp: str, variant: str, seed: int, acc: float):
    config = {
        "data": {"source": "task", "task": "mqar", "eval_settings": [{"num_kv_pairs": k} for k in PAIRS]},
        "train": {"budget": {"steps": 1000}},
    }
    results = []
    for k in PAIRS:
        tags = {"split": "test", "task": "mqar", "num_kv_pairs": k}
        results += [
            Result("accuracy", acc, "", tags),
            Result("guess_accuracy", NULL, "", tags),
            Result("answers", ANSWERS, "count", tags),
        ]
    summary = {
        "val_loss": 2.0,
        "test_loss": 2.0,
        "test_accuracy": acc,
        "test_guess_accuracy": NULL,
        "val_guess_accuracy": NULL,
        "test_answers_total": ANSWERS * len(PAIRS),
        "state_elements": 1024,
        "floor_method": "declared",
        "protocol": {**protocol_dict("accuracy", [], None), "tune": False},
    }
    run = record(f"{exp}-{variant}-{seed}", exp, "train", variant, seed, {}, config, summary, results, suite=SUITE)
    reached = acc > 0.9  # the validation curve reaches the time-to-learn target 0.9 where the test value does
    run.metrics = [
        Metric(s, s * 64, s / 100, "val/accuracy", 0.95 if reached and s >= 400 + 200 * seed else 0.3)
        for s in range(200, 1001, 200)
    ]
    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "s.sqlite"
    with Store(path) as store:
        for exp, variants in ACCURACY.items():
            for variant, values in variants.items():
                for seed, acc in enumerate(values):
                    store.save_run(_run(exp, variant, seed, acc))
    return build_report(load_store(path, SUITE))


# Claims: ("seeds", k, n) the row's own seeds; ("state", s) its learned state; ("outcome", {allowed}) which
# of decided / undetermined / stopped its comparison can be.
STOPPED, OPEN, DONE = "stopped", "undetermined", "decided"
EVIDENCE = [  # what is said of another row or of the experiment: removed before the row's words are read
    r"baseline not learned \([^()]* seeds beyond it\)",  # the baseline's value text (a verdict cell's is the row's)
    r"\([\w.-]+ \d+ of \d+\)",  # the share test's baseline count: '(softmax 3 of 3)'
    re.escape(DECIDED_WHERE_LEARNED.format(metric="accuracy")),  # said of the decided rows
    re.escape(DECIDED_ON_SHARE),  # some row's seeds split: the variant's or the baseline's
]


def _claims(text: str) -> list[tuple]:
    """The claims ``text`` makes about the row it is printed on."""
    out: list[tuple] = []
    for code, outcome in ((BASELINE_NOT_LEARNED_AT_BUDGET, STOPPED), (BASELINE_NOT_LEARNED, STOPPED)):
        if code in text:
            out.append(("outcome", {outcome}))
    for pattern in EVIDENCE:
        text = re.sub(pattern, "", text)
    text = text.replace(BASELINE_NOT_LEARNED_AT_BUDGET, "").replace(BASELINE_NOT_LEARNED, "")
    if BASELINE_SPLIT in text:
        out.append(("outcome", {STOPPED}))
        text = text.replace(BASELINE_SPLIT, "")
    for k, n in re.findall(r"(\d+) of (\d+)(?: seeds)? beyond", text):  # '(linear 0 of 3 seeds beyond it)'
        out.append(("seeds", int(k), int(n)))
    for state, words in STATE_WORDS.items():
        for word in sorted(words, key=len, reverse=True):
            pattern = re.escape(word).replace(r"\{k\}", r"(\d+)").replace(r"\{n\}", r"(\d+)")
            if state == LEARNED:
                pattern = rf"^{pattern}$"  # 'learned' alone: a status, not part of another word
            for m in re.finditer(rf"(?<!not ){pattern}", text):
                out.append(("seeds", int(m[1]), int(m[2])) if m.groups() else ("state", state))
                if state != LEARNED:
                    out.append(("outcome", {STOPPED}))  # the row's own state stopped the comparison
            text = re.sub(pattern, "", text)
    if re.search(rf"(?:^|, ){UNDETERMINED}\b(?! on fresh| at final)|every final \w+ {UNDETERMINED}", text):
        out.append(("outcome", {OPEN}))
    if UNDETERMINED_AT.format(metric="accuracy") in text:
        out.append(("outcome", {OPEN}))
    if NO_FINAL_DECISION.format(metric="accuracy") in text:
        out.append(("outcome", {OPEN, STOPPED}))
    if re.search(rf"^(?:{'|'.join(DECIDED)})\b", text):
        out.append(("outcome", {DONE}))
    return out


def _code_claims(code: str) -> list[tuple]:
    """summary.csv's decision code read as claims."""
    if code in DECIDED:
        return [("outcome", {DONE})]
    if code == UNDETERMINED:
        return [("outcome", {OPEN})]
    if code in NOT_COMPARED:
        return _claims(code) or [("outcome", {STOPPED})]
    return []


def _row_texts(report) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """Every (where, text) the report prints about each row (experiment, variant, setting)."""
    texts: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    tables = {t.slug: t for s in report.sections for t in s.tables}
    summary = tables["summary"]
    for (_, raw), (_, view) in zip(summary.data.iterrows(), summary.view.iterrows(), strict=True):
        key = (raw["experiment"], raw["variant"], raw["setting"])
        texts[key] += [("summary.csv decision", raw["decision"]), ("summary.csv decision_text", raw["decision_text"])]
        texts[key] += [("summary.csv learned", raw["learned"]), ("Summary learned", view["learned at this budget"])]
        texts[key] += [("summary.csv learned_seeds", f"{raw['learned_seeds']} beyond")]
    rows = summary.data
    settings = {
        (e, v): list(g["setting"]) for (e, v), g in rows.groupby(["experiment", "variant"], sort=False)
    }  # overall first, then each setting in the printed order
    head = report.headline
    baselines = set(rows.loc[rows["decision"] == BASELINE, "variant"])
    verdict = head.tables[0].view
    for _, line in verdict.iterrows():
        for column, cell in line.items():
            exp = str(column).split(" (")[0]
            if (exp, line["variant"]) not in settings or line["variant"] in baselines:
                continue
            overall, _, per_setting = str(cell).partition(" · by ")
            texts[(exp, line["variant"], OVERALL)].append(("verdict cell", overall))
            words = per_setting.split(": ", 1)[1].split(" / ") if per_setting else []
            for setting, word in zip(settings[(exp, line["variant"])][1:], words, strict=True):
                texts[(exp, line["variant"], setting)].append(("verdict cell, per setting", word))
    for note in head.notes:
        _sentence_texts(note, settings, baselines, texts)
    return texts


def _sentence_texts(note: str, settings: dict, baselines: set[str], texts: dict) -> None:
    """The first screen's sentence of one variant, read per experiment; or a time-to-learn sentence,
    whose head is said of every row compared with the baseline."""
    if m := re.match(r"(\w+), time to [\d.]+ \w+ \(([^()]*)\): ", note):
        for (exp, variant), names in settings.items():
            if exp == m[1] and variant not in baselines:
                for setting in names:
                    texts[(exp, variant, setting)].append(("time-to-learn head", m[2]))
        return
    variant, _, rest = note.partition(": ")
    variant = variant.removesuffix(" (baseline)")
    starts = sorted(
        (rest.find(f"{exp} accuracy "), exp) for exp, v in settings if v == variant and f"{exp} accuracy " in rest
    )
    ends = [s for s, _ in starts[1:]] + [len(rest)]
    for (start, exp), end in zip(starts, ends, strict=True):
        part = re.sub(r"; (?:train step|state) .*$", "", rest[start:end].rstrip("; "))
        bracket = re.search(r" \[([^\[\]]+)\]$", part)
        if bracket is None:
            continue
        said = ("first screen, bracket", re.sub(r": (?:beyond )?[\w.-]+ [-+]?\d\S*$", "", bracket[1]))  # less its null
        if note.startswith(f"{variant} (baseline)"):  # the baseline's own overall value
            texts[(exp, variant, OVERALL)].append(said)
            continue
        for setting in settings[(exp, variant)]:  # what a variant's numbers mean: said of each of its rows
            texts[(exp, variant, setting)].append(said)
        body = part[: bracket.start()]
        body, _, per_setting = body.partition("; by ")
        texts[(exp, variant, OVERALL)].append(("first screen", re.sub(r"^\w+ accuracy \S+ \((.*)\)$", r"\1", body)))
        words = per_setting.split(": ", 1)[1].split(" / ") if per_setting else []
        for setting, word in zip(settings[(exp, variant)][1:], words, strict=True):
            texts[(exp, variant, setting)].append(("first screen, per setting", re.sub(r"^[-+]\d\S* ", "", word)))


def _contradictions(said: list[tuple[str, str]]) -> list[str]:
    claims = [(where, text, c) for where, text in said for c in _claims(text)]
    claims += [(where, text, c) for where, text in said if where == "summary.csv decision" for c in _code_claims(text)]
    out = []
    seeds = {(c[1], c[2]) for _, _, c in claims if c[0] == "seeds"}
    states = {c[1] for _, _, c in claims if c[0] == "state"} | {learned_state(k, n) for k, n in seeds}
    if len(seeds) > 1 or len(states) > 1:
        out.append(f"learned states {sorted(states)} / seeds {sorted(seeds)}")
    allowed = [c[1] for _, _, c in claims if c[0] == "outcome"]
    if allowed and not set.intersection(*allowed):
        out.append(f"outcomes {[sorted(a) for a in allowed]}")
    return out


def test_no_row_says_two_things_about_itself(report):
    texts = _row_texts(report)
    assert len(texts) == sum(len(v) for v in ACCURACY.values()) * (1 + len(PAIRS))  # every row read
    failures = []
    for key, said in texts.items():
        for problem in _contradictions(said):
            failures.append(f"{key}: {problem}\n    " + "\n    ".join(f"{w}: {t!r}" for w, t in said))
    assert not failures, "rows that contradict themselves:\n" + "\n".join(failures)


def test_every_printer_was_read_and_every_state_is_covered(report):
    """The property above reads each printer for each state, so it cannot pass by reading nothing."""
    texts = _row_texts(report)
    wheres = {w for said in texts.values() for w, _ in said}
    assert wheres >= {
        "summary.csv decision",
        "summary.csv decision_text",
        "Summary learned",
        "verdict cell",
        "verdict cell, per setting",
        "first screen",
        "first screen, per setting",
        "first screen, bracket",
        "time-to-learn head",
    }
    rows = next(t for s in report.sections for t in s.tables if t.slug == "summary").data
    assert set(rows["learned"]) == {LEARNED, SPLIT, NOT_LEARNED}
    assert {UNDETERMINED, NOT_LEARNED, BASELINE_NOT_LEARNED, SPLIT, BASELINE_SPLIT} <= set(rows["decision"])


def test_the_issues_stick_breaking_row(report):
    """Learned on 2 of 3 seeds against a baseline at chance: the code names the baseline, the bracket
    says the baseline did not learn, and no word calls the row itself not learned."""
    rows = next(t for s in report.sections for t in s.tables if t.slug == "summary").data
    stick = rows[(rows["experiment"] == "count") & (rows["variant"] == "stick")].iloc[0]
    assert (stick["learned"], stick["learned_seeds"]) == (SPLIT, "2 of 3")
    assert stick["decision"] == BASELINE_NOT_LEARNED
    sentence = next(n for n in report.headline.notes if n.startswith("stick: "))
    assert f"[{BASELINE_NOT_LEARNED_AT_BUDGET}]" in sentence and "[not learned at this budget" not in sentence
    linear = next(n for n in report.headline.notes if n.startswith("linear: "))
    assert "count accuracy" in linear and "[not learned at this budget]" in linear  # linear learned on no seed


def test_the_time_to_learn_head_names_no_state_the_rows_deny(report):
    heads = [n for n in report.headline.notes if ", time to 0.9 accuracy (" in n]
    assert heads and all("(no final accuracy decided at this budget)" in n for n in heads)
    assert not any("undetermined at this budget" in n for n in heads)


def test_the_claims_reader_sees_a_contradiction():
    """The reader is not blind: the issue's own words contradict, the fixed ones do not."""
    issue = [
        ("summary.csv decision", NOT_LEARNED),
        ("summary.csv learned_seeds", "2 of 3 beyond"),
        ("first screen, bracket", "not learned at this budget"),
    ]
    assert _contradictions(issue)
    head = [
        ("summary.csv decision", NOT_LEARNED),
        ("time-to-learn head", "every final accuracy undetermined at this budget"),
    ]
    assert _contradictions(head)
    fixed = [
        ("summary.csv decision", BASELINE_NOT_LEARNED),
        ("summary.csv learned_seeds", "2 of 3 beyond"),
        ("first screen, bracket", BASELINE_NOT_LEARNED_AT_BUDGET),
        ("time-to-learn head", NO_FINAL_DECISION.format(metric="accuracy")),
    ]
    assert not _contradictions(fixed)
