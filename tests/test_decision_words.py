"""Every decision word the report prints is defined in docs/protocol.md's words table, and the table
names no word the report never prints.

Three checks, none of which trusts the vocabulary module alone:
- the table's words (read from the markdown) and ``attnbench.decision_words`` are the same set, and
  every word there is printed by some report module (it is used outside the vocabulary);
- the deciding functions, driven over a spread of inputs (better / worse / equivalent /
  undetermined, split seeds, not learned, the share test, failed rows, findings, time to learn,
  speed, scaling), print only words the table defines: each printed text, less its evidence
  (numbers, intervals, names), must be made of table words, matched by patterns built from the
  markdown;
- a report built from a synthetic store prints only table words in its decision columns."""

from __future__ import annotations

import ast
import math
import re
from functools import cache
from typing import Any, cast

import pandas as pd
import pytest

from attnbench import decision_words
from attnbench.report.anchors import ANCHORS
from attnbench.report.build import build_report
from attnbench.report.decision import decide
from attnbench.report.expectations import verdict
from attnbench.report.floors import Floor
from attnbench.report.gate import gate_text
from attnbench.report.headline import budget_meaning, failed_clause, trigram_clause
from attnbench.report.learned import learned
from attnbench.report.load import load_store
from attnbench.report.paired import compare_rows, no_interval
from attnbench.report.ratios import ratio_text
from attnbench.report.replication import Replication, compare
from attnbench.report.scaling_fits import decision_text, goodness_text, law_text
from attnbench.report.speed import crossover_text
from attnbench.report.time_to_learn import Row, versus_word
from attnbench.stats.learned import row_learned, share_test
from attnbench.stats.power_laws import fit_scaling
from attnbench.stats.scaling_comparison import decide_exponent
from attnbench.stats.sequential import Design
from attnbench.stats.slopes import crossover
from attnbench.stats.survival import log_rank, median_time
from tests.helpers import REPO
from tests.report_store import SUITE, protocol_dict, record, write_store

DOC = REPO / "docs" / "protocol.md"
HEADING = "### What the report's words mean"
NUMBER = r"[-+]?[0-9][0-9.,e+-]*"
NAME = r"[\w.\-]+"
FIELDS = {  # what a field in braces stands for, as a pattern
    **dict.fromkeys(("margin", "k", "n", "n1", "n2", "value", "ratio", "T", "budget"), NUMBER),
    **dict.fromkeys(("baseline", "variant", "experiment", "metric", "unit", "status", "order"), NAME),
    "variants": rf"{NAME}(?: and {NAME})+",
    "target": rf"{NUMBER} \w+",
    "checks": rf"{NAME}(?:, {NAME})*",
}
SEPARATORS = ("; ", ": ", ", ", " ")


@cache
def table_words() -> tuple[str, ...]:
    """The words of the table (every code span of each row's first cell), as the markdown spells them."""
    text = DOC.read_text(encoding="utf-8").split(HEADING, 1)[1]
    rows = []
    for line in text.splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("| `"):
            rows.append(line)
    return tuple(w for row in rows for w in re.findall(r"`([^`]+)`", row.split(" | ")[0]))


@cache
def patterns() -> dict[str, re.Pattern[str]]:
    """Each table word as a pattern: its fields as FIELDS says, the rest literal."""
    out = {}
    for word in table_words():
        parts = re.split(r"\{(\w+)\}", word)
        out[word] = re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?:{FIELDS[p]})" for i, p in enumerate(parts)))
    return out


def words_of(text: str) -> list[str] | None:
    """The table words ``text`` is made of, joined by separators; None where any part is none."""
    for word, pattern in patterns().items():
        if pattern.fullmatch(text):
            return [word]
    for sep in SEPARATORS:
        for m in re.finditer(re.escape(sep), text):
            head, tail = text[: m.start()], text[m.end() :]
            first = [w for w, p in patterns().items() if p.fullmatch(head)]
            rest = words_of(tail) if first else None
            if rest is not None:
                return first[:1] + rest
    return None


class Printed:
    """The words printed by the deciding functions in one test, each checked against the table."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, *texts: str) -> None:
        for text in texts:
            found = words_of(text)
            assert found is not None, f"the report prints {text!r}: no word of docs/protocol.md's words table"
            self.seen.update(found)


# What each printed text holds besides its words: evidence to strip (numbers, intervals, names).
def paired_words(text: str) -> list[str]:
    """A comparison's printed decision: '<mean> [<lo>, <hi>], n=6, exact p=0.0312, <words>' (an
    undetermined row adds '(<why>)'), a share test '<words> (<baseline> k of n): <words>[, Boschloo
    p=...]', or '<words> (<evidence>)'."""
    if m := re.fullmatch(rf".+, n=\d+(?:, exact p={NUMBER})?, (.+)", text):
        words = m[1]
        if words_of(words) is None and (why := re.fullmatch(r"(.+?) \((.+)\)", words)):
            return [why[1]]  # the reason an interval decided nothing is evidence, not a word
        return [words]
    if m := re.fullmatch(rf"(.+?) \({NAME} \d+ of \d+\): (.+?)(?:, Boschloo p={NUMBER})?", text):
        return [m[1], m[2]]
    if words_of(text) is None and (m := re.fullmatch(r"(.+?) \([^()]*\)", text)):
        return [m[1]]
    return [text]


def without_count(text: str) -> str:
    """'learned (3 of 3 seeds)' -> 'learned'."""
    return re.sub(r" \(\d+ of \d+ seeds\)$", "", text)


LOSS_FLOOR = Floor("bigram", 2.5, False)


def seeds(*values: float) -> dict[int, float]:
    return dict(enumerate(values))


def test_the_table_and_the_vocabulary_name_the_same_words():
    assert table_words(), f"no words table under {HEADING!r} in docs/protocol.md"
    doubled = sorted({w for w in table_words() if table_words().count(w) > 1})
    assert not doubled, f"words defined twice in the table: {doubled}"
    missing = sorted(set(decision_words.VOCABULARY) - set(table_words()))
    assert not missing, f"the report prints words docs/protocol.md's table lacks: {missing}"
    extra = sorted(set(table_words()) - set(decision_words.VOCABULARY))
    assert not extra, f"docs/protocol.md's table names words the report never prints: {extra}"


def test_every_word_of_the_vocabulary_is_printed_by_a_report_module():
    """A word no module uses is a table row the report never prints. A word the vocabulary's own
    rules (``budget_words``, ``short_outcome``, ...) return counts where a module uses that rule."""
    names = {n for n, v in vars(decision_words).items() if n.isupper() and isinstance(v, str)}
    own = ast.parse((REPO / "harness" / "decision_words.py").read_text(encoding="utf-8"))
    rules = {  # each function or tuple of the vocabulary -> the names it uses (words and other rules)
        node.name if isinstance(node, ast.FunctionDef) else ast.unparse(node.targets[0]): {
            n.id for n in ast.walk(node) if isinstance(n, ast.Name)
        }
        for node in own.body
        if isinstance(node, ast.FunctionDef) or (isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple))
    }
    used: set[str] = set()
    for path in (REPO / "harness").rglob("*.py"):
        if path.name == "decision_words.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "attnbench.decision_words"
            for a in node.names
        }
        used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in imported}
    for _ in rules:  # what a used rule uses, and what the rules it calls use
        used |= {name for rule in used & set(rules) for name in rules[rule]}
    assert names - used == set(), f"vocabulary words no report module prints: {sorted(names - used)}"


def test_paired_decisions_print_only_table_words():
    printed = Printed()
    loss = False  # higher is not better
    spread = [
        ([-0.10, -0.12, -0.11, -0.105, -0.115, -0.11], 0.05),  # better
        ([0.10, 0.12, 0.11, 0.105, 0.115, 0.11], 0.05),  # worse
        ([-0.010, -0.011, -0.012, -0.0105, -0.0115, -0.011], 0.05),  # better, within the margin
        ([0.001, -0.002, 0.0015, -0.0005, 0.0, 0.001], 0.05),  # equivalent
        ([0.10, -0.10, 0.05, -0.05, 0.08, -0.02], 0.01),  # undetermined
        ([0.10, -0.10, 0.05, -0.05, 0.08, -0.02], None),  # undetermined, no margin
        ([0.10, 0.12, 0.11], 0.05),  # undetermined: 3 paired seeds, too few for an exact test
        ([0.20, 0.21, 0.22, 0.40, 0.41, 0.42], 0.05),  # undetermined: two groups
        ([0.1], 0.05),  # one seed: no interval
        ([], 0.05),  # no paired seeds
    ]
    outcomes = set()
    for diffs, margin in spread:
        for design in (None, Design(3, 6)):
            d = decide(diffs, margin, loss, design)
            outcomes.add(d.outcome)
            printed(d.outcome, *paired_words(d.text(decimals=3)))
    assert outcomes == {"better", "worse", "equivalent", "undetermined"}
    printed(*paired_words(no_interval([0.1, 0.2], 0.05).text()), *paired_words(no_interval([], 0.05).text()))
    assert {"equivalent within ±{margin}", "(within ±{margin})", "no paired seeds"} <= printed.seen
    assert "no interval requested (protocol.interval: false)" in printed.seen


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        (seeds(2.0, 2.1, 2.0, 2.05, 2.02, 2.08), seeds(2.2, 2.3, 2.2, 2.22, 2.25, 2.24), "better"),
        (seeds(2.6, 2.7, 2.8), seeds(2.2, 2.3, 2.2), "not learned"),
        (seeds(2.0, 2.1, 2.0), seeds(2.6, 2.7, 2.8), "baseline not learned"),
        (seeds(2.0, 2.7), seeds(2.2, 2.3), "cannot decide with {n1} vs {n2} seeds"),
        (seeds(*[2.0] + [2.7] * 9), seeds(*[2.2] * 10), "learns on fewer seeds"),
        (seeds(*[2.0] * 10), seeds(*[2.2] * 2 + [2.7] * 8), "learns on more seeds"),
        (seeds(*[2.0] * 8 + [2.7] * 2), seeds(*[2.2] * 10), "share undetermined"),
    ],
)
def test_learned_gates_and_share_tests_print_only_table_words(mine, theirs, expected):
    printed = Printed()
    d = compare_rows(mine, theirs, LOSS_FLOOR, False, 0.05, labels=("gla", "softmax"))
    printed(d.outcome, *paired_words(d.text(decimals=3)))
    for row in (mine, theirs):
        printed(learned(row, LOSS_FLOOR).seeds_text(), without_count(row_learned(row, 2.5, False).text()))
    assert expected in printed.seen


def test_learned_status_words_without_a_null_or_with_counted_answers():
    printed = Printed()
    printed(learned(seeds(0.5, 0.6), None).seeds_text(), row_learned(seeds(0.5), None, True).text())
    accuracy = Floor("null", 0.25, True)
    for acc in ((0.9, 0.92), (0.27, 0.26), (0.9, 0.26)):  # learned; within chance of the null; split
        printed(without_count(row_learned(seeds(*acc), accuracy.value, True, seeds(400, 400)).text()))
    test = share_test(1, 2, 2, 2)
    printed(test.outcome)
    assert {
        "unknown",
        "learned",
        "not learned",
        "learned on {k} of {n} seeds",
        "cannot decide with {n1} vs {n2} seeds",
    } <= printed.seen


def test_findings_and_the_first_screen_print_only_table_words():
    printed = Printed()
    for found in (
        "better",
        "worse",
        "equivalent",
        "undetermined",
        "not learned",
        "learned on some seeds",
        "no interval",
    ):
        printed(verdict("worse", found))
    assert {"agrees", "disagrees", "undetermined", "not testable at this budget"} <= printed.seen

    def meaning(*decisions: str) -> str:
        return budget_meaning(pd.DataFrame({"metric": "loss", "decision": list(decisions)}))

    printed(
        meaning("better", "baseline"),
        meaning("worse", "not learned"),
        meaning("learned on some seeds", "undetermined"),
        meaning("not learned", "undetermined"),
        meaning("undetermined", "baseline"),
        meaning("no interval"),
    )
    for flags in ("failed seed(s); oom seed(s)", "diverged seed(s)"):
        clause = failed_clause(pd.Series({"flags": flags, "value_mean": None, "loss_seeds": 0}))
        assert clause is not None
        printed(re.sub(r" \(seeds .*\)$", "", clause))
    row = {"trigram": 2.1, "below_trigram": 2, "4gram": 1.9, "below_4gram": 0, "loss_seeds": 6}
    clause = trigram_clause(pd.Series(row)).removeprefix("; ")
    assert clause == "below the trigram (2.100) on 2 of 6 seeds, below the 4gram (1.900) on 0 of 6 seeds"
    printed(clause)
    assert "below the {order} ({value}) on {k} of {n} seeds" in printed.seen
    assert {"failed: no seed finished", "diverged: no seed finished", "decided at final {metric}"} <= printed.seen


def _row(times: list[float], reached: list[bool], versus=None, baseline: str | None = None) -> Row:
    """A time-to-learn row of 0.9 accuracy in steps (its selection is never read)."""
    return Row(
        cast(Any, None),
        "accuracy",
        0.9,
        {"steps": times},
        reached,
        {"steps": median_time(times, reached)},
        versus,
        baseline,
    )


def test_time_to_learn_prints_only_table_words():
    printed = Printed()
    never = [3000.0] * 3
    cases = [  # (variant times, reached), (baseline times, reached)
        (([400.0] * 3, [True] * 3), (never, [False] * 3)),  # 3 vs 3: cannot decide
        (([400.0] * 6, [True] * 6), ([2600.0] * 6, [True] * 6)),  # faster
        (([2600.0] * 6, [True] * 6), ([400.0] * 6, [True] * 6)),  # slower
        (([400.0, 2600.0] * 3, [True] * 6), ([2600.0, 400.0] * 3, [True] * 6)),  # no difference
        (([400.0, 3000.0, 3000.0], [True, False, False]), (never, [False] * 3)),  # median not reached
    ]
    for (tv, ev), (tb, eb) in cases:
        lr = log_rank(tv, ev, tb, eb)
        assert lr is not None
        printed(versus_word(lr))
        mine, base = _row(tv, ev, lr, "softmax"), _row(tb, eb)
        for text in (mine.time_text("steps"), base.time_text("steps")):
            interval = re.fullmatch(rf"{NUMBER} \[.+, (.+)\]", text)  # '800 [600, 1000]': no word but its limit
            if interval is None:
                printed(text)
            elif not re.fullmatch(NUMBER, interval[1]):
                printed(interval[1])
        printed(re.sub(rf"^.* p={NUMBER}: | (?:than|vs) {NAME}$| \(vs .*\)$", "", mine.versus_text()))
        printed(base.versus_text())
    assert log_rank(never, [False] * 3, never, [False] * 3) is None  # neither reached it: no test
    printed(re.sub(r" \(vs .*\)$", "", _row([], [], None, "softmax").versus_text()))
    assert {"faster", "slower", "no difference detected", "cannot decide with {n1} vs {n2} seeds"} <= printed.seen
    assert {"did not reach {target} in {budget} {unit}", "median not reached in {budget} {unit}"} <= printed.seen
    assert {"neither reached it", "baseline"} <= printed.seen


def test_speed_words_are_table_words():
    printed = Printed()
    for interval in ((1.5, 1.3, 1.7), (0.5, 0.4, 0.6), (1.05, 0.9, 1.2)):
        printed(re.sub(r" [\[(].*[\])]$", "", ratio_text(*interval)))
    base = {256: 1.0, 1024: 4.0, 4096: 16.0}
    for variant in (
        {256: 2.0, 1024: 3.0, 4096: 5.0},
        {256: 0.5, 1024: 1.0, 4096: 2.0},
        {256: 2.0, 1024: 8.0, 4096: 32.0},
    ):
        for against in (base, {}):
            cx = crossover(variant, against)
            text = crossover_text(pd.Series({"status": cx.status, "T": cx.T, "T_interp": cx.T_interp}))
            printed(re.sub(r" \(≈.* interpolated\)$", "", text))
    assert {"{ratio}x faster", "{ratio}x slower", "no speed difference detected", "faster from T={T}"} <= printed.seen
    assert {
        "faster at every compared T",
        "never faster at the compared T",
        "no softmax baseline measured",
    } <= printed.seen


def test_scaling_words_are_table_words():
    printed = Printed()
    for intervals, margin in (
        ((0.01, 0.2, 0.02, 0.18), None),
        ((-0.2, -0.01, -0.18, -0.02), 0.5),
        ((-0.02, 0.02, -0.01, 0.01), 0.05),
        ((-0.3, 0.3, -0.2, 0.2), 0.05),
    ):
        outcome, within = decide_exponent(*intervals, margin)
        for misfit in ((), ("gla",), ("gla", "softmax")):
            printed(decision_text(outcome, within, margin, "softmax", misfit))
    sizes = [1e4, 3e4, 1e5, 3e5, 1e6]
    law = [3.0 * x**-0.2 + 1.5 for x in sizes]
    for groups in (
        [[v] for v in law],  # one seed per size: no spread to judge misses by
        [[v - 0.001, v + 0.001] for v in law],  # within seed noise
        [[v + 0.2 * math.sin(i * 2.0) - 0.0005, v + 0.2 * math.sin(i * 2.0) + 0.0005] for i, v in enumerate(law)],
        [[2.0 * x**-0.1 - 0.001, 2.0 * x**-0.1 + 0.001] for x in sizes],  # no irreducible term
    ):
        fit = fit_scaling(sizes, groups, draws=200)
        printed(
            re.split(r": | \(", goodness_text(fit), maxsplit=1)[0], re.sub(r"^.*\((.+?): .*$", r"\1", law_text(fit))
        )
    assert {"steeper", "shallower", "scales like {baseline} (within ±{margin})", "undetermined"} <= printed.seen
    assert {"fits", "does not fit", "no seed spread to judge misses by"} <= printed.seen
    assert {"irreducible term needed", "irreducible term not supported"} <= printed.seen


def test_gate_and_anchor_words_are_table_words():
    printed = Printed()
    printed(
        gate_text([{"gate": {"failed": []}}]), gate_text([{"gate": {"failed": ["causal_forward"]}}]), gate_text([{}])
    )
    anchor = ANCHORS[0]
    printed(anchor.result(anchor.reference), anchor.result(anchor.reference + 1.0))
    assert {"passed", "FAILED {checks}", "not recorded", "pass", "FAIL"} <= printed.seen


def test_replication_words_are_table_words():
    printed = Printed()
    worse = decide([0.10, 0.12, 0.11, 0.105, 0.115, 0.11], 0.05, False)
    equivalent = decide([0.001, -0.002, 0.0015, -0.0005, 0.0, 0.001], 0.05, False)
    fresh = {
        "worse": worse,
        "better": decide([-0.10, -0.12, -0.11, -0.105, -0.115, -0.11], 0.05, False),
        "equivalent": equivalent,
        "undetermined": decide([0.10, 0.12, 0.11], 0.05, False),
    }
    for original in (worse, equivalent):
        for decision in fresh.values():
            status = compare(original, decision)
            replica = Replication(status, tuple(range(6, 12)), decision)
            assert replica.text().startswith(f"{status} (seeds 6-11: ")
            printed(status)
    printed(Replication(decision_words.NOT_REPLICATED, (), None).text())
    assert {
        "repeated",
        "reversed",
        "not repeated",
        "undetermined on fresh seeds",
        "not replicated",
    } <= printed.seen


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The synthetic store's report, with a failed experiment, a failed check and an anchor run."""
    protocol = protocol_dict("loss", [], None)
    failed = [
        record(f"broken-{s}", "broken", "train", "softmax", s, {}, {}, {"protocol": protocol}, status="failed")
        for s in (0, 1)
    ]
    anchor = record("anchor", "mqar", "train", "softmax", 0, {}, {"data": {"task": "mqar"}}, {"val_accuracy": 0.995})
    path = write_store(tmp_path_factory.mktemp("store") / "s.sqlite", [*failed, anchor])
    return build_report(load_store(path, SUITE))


def test_a_built_report_prints_only_table_words_in_its_decision_columns(report):
    printed = Printed()
    views = {t.slug: t.view for s in report.sections for t in s.tables}
    summary = views["summary"]
    decision_columns = [c for c in summary.columns if c.endswith(", n, decision")]
    for column in decision_columns:
        for text in summary[column]:
            printed(*paired_words(text))
    for column in ("learned at this budget", "trust gate"):
        printed(*summary[column])
    printed(*(re.sub(r" on seeds .*$", "", t) for t in summary["replication on fresh seeds"] if t != "—"))
    for column in ("train-step speedup", "decode speedup / token"):
        printed(*(re.sub(r" [\[(].*$| at T=\d+.*$", "", t) for t in summary[column] if t != "—"))
    expectations = views["expectations"]
    printed(*expectations["verdict"], *(w for t in expectations["found"] for w in paired_words(t)))
    gate = views["trust-gate"]
    printed(*(re.sub(r": .*$", "", cell) for c in gate.columns if c != "variant" for cell in gate[c] if cell != "—"))
    printed(*views["anchors"]["result"])
    failed = [s.failed for s in report.sections if s.failed]
    printed(*(re.sub(r" \(.*$", "", f) for f in failed))
    for note in report.headline.notes:
        for clause in re.findall(r"; by [\w/]+ [^:]+: (.+?)(?: \[|;|$)", note):
            printed(*(re.sub(rf"^{NUMBER} ", "", part) for part in clause.split(" / ")))
        for bracket in re.findall(r"\[([^\[\]]*[a-z][^\[\]]*)\]", note):  # what the budget's numbers mean
            printed(re.sub(rf": (?:beyond )?{NAME} {NUMBER}", "", bracket))
    assert {"worse", "equivalent within ±{margin}", "equivalent ±{margin}", "baseline", "passed"} <= printed.seen
    assert "not replicated" in printed.seen  # decided rows of a store that ran no replication round
    assert {"agrees", "disagrees", "no run of {experiment} finished", "configuration differs"} <= printed.seen
