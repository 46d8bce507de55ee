"""Published findings a suite states it can test (``protocol.expectations``), each beside what
this run found: agrees, disagrees, undetermined (the run could not decide), or not testable at
this budget (the baseline or the variant has not learned on every seed). A trend claim (``trend``:
"recall falls as pairs grow") agrees only where the variant learned at the easiest setting of its
axis and falls against the baseline at the hardest; a variant that never learned shows no trend."""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnbench.decision_words import AGREES, DISAGREES, NOT_COMPARED, NOT_RUN, NOT_TESTABLE
from attnbench.report.decision import BETTER, EQUIVALENT, UNDETERMINED, WORSE
from attnbench.report.document import Section, Table
from attnbench.report.learned import LEARNED, NOT_LEARNED, SPLIT
from attnbench.report.load import StoreData
from attnbench.report.paired import eval_settings, learned_of, metric_of, paired_decision, protocol_of, setting_label
from attnbench.report.selection import Selection, select


def verdict(expected: str, found: str) -> str:
    """A decided outcome agrees when it is the expected one; "equivalent" disagrees with an
    expected difference (and a difference with expected equivalence); a comparison with a model
    that has not learned tests nothing."""
    if found in NOT_COMPARED:
        return NOT_TESTABLE
    if found not in (BETTER, WORSE, EQUIVALENT):  # undetermined, or no interval asked for
        return UNDETERMINED
    return AGREES if found == expected else DISAGREES


def easiest_setting(sel: Selection, e: dict[str, Any]) -> dict[str, Any] | None:
    """The evaluation setting at the other extreme of a trend claim's axis from its hardest
    ``setting`` (the same other options); None where the experiment scores no other point."""
    axis, hardest = e["trend"], e["setting"]
    others = [s for s in eval_settings(sel) if s.get(axis) != hardest[axis]]
    same = [s for s in others if all(s.get(k) == v for k, v in hardest.items() if k != axis)] or others
    if not same:
        return None
    return max(same, key=lambda s: abs(float(s[axis]) - float(hardest[axis])))


def untestable_trend(data: StoreData, mine: Selection, e: dict[str, Any], metric: str) -> str | None:
    """Why a trend claim cannot be tested here ("not testable at this budget: linear did not learn at
    num_kv_pairs=2"), or None where the variant learned at the easiest setting on every seed."""
    easiest = easiest_setting(mine, e)
    if easiest is None:
        return f"{NOT_TESTABLE}: the run scores {e['trend']} at one setting only, so it shows no trend"
    gained = learned_of(data, mine, metric, easiest)
    if gained.status == LEARNED:
        return None
    how = "did not learn" if gained.status != SPLIT else f"learned on {gained.k} of {gained.n} seeds only"
    return f"{NOT_TESTABLE}: {e['variant']} {how} at {setting_label(easiest)}"


def expectation_rows(data: StoreData) -> list[dict]:
    """One row per stated expectation of every train experiment with a protocol."""
    train = data.runs_of("train")
    rows = []
    for exp in dict.fromkeys(train["experiment"]):
        sels = select(train[train["experiment"] == exp])
        if not sels:
            continue
        protocol = protocol_of(sels[0])
        by_variant = {s.variant: s for s in sels}
        metric, margin = metric_of(protocol), protocol.get("margin")
        for e in protocol.get("expectations") or []:
            versus = e.get("versus") or protocol.get("baseline", "softmax")
            mine, theirs = by_variant.get(e["variant"]), by_variant.get(versus)
            row = {
                "experiment": exp,
                "claim": e["claim"],
                "source": e["source"],
                "comparison": f"{e['variant']} vs {versus}, test {metric} at {setting_label(e.get('setting'))}"
                + (f" (a trend along {e['trend']}: learned at its easiest setting first)" if e.get("trend") else ""),
                "expected": e["outcome"],
                "found": NOT_RUN,
                "decision": UNDETERMINED,
                "verdict": UNDETERMINED,
            }
            why = untestable_trend(data, mine, e, metric) if mine is not None and e.get("trend") else None
            if why is not None:
                row.update(found=why, decision=NOT_LEARNED, verdict=NOT_TESTABLE)
            elif mine is not None and theirs is not None:
                d, _ = paired_decision(data, mine, theirs, metric, margin, e.get("setting"))
                row.update(found=d.text(decimals=3), decision=d.outcome, verdict=verdict(e["outcome"], d.outcome))
            else:
                row["found"] = f"{NOT_RUN}: {e['variant'] if mine is None else versus} has no runs here"
            rows.append(row)
    return rows


def expectations_section(data: StoreData) -> list[Section]:
    rows = expectation_rows(data)
    if not rows:
        return []
    raw = pd.DataFrame(rows)
    view = raw[["experiment", "claim", "source", "comparison", "expected", "found", "verdict"]]
    counts = raw["verdict"].value_counts()
    intro = (
        f"{counts.get(AGREES, 0)} agree, {counts.get(DISAGREES, 0)} disagree, "
        f"{counts.get(UNDETERMINED, 0)} undetermined, {counts.get(NOT_TESTABLE, 0)} {NOT_TESTABLE} (a model "
        "that has not cleared its null level on every seed; for a trend claim, a variant that did not learn at "
        "the easiest setting of its axis). Each finding is checked with the same paired decision "
        f"as the summary (better / worse / {EQUIVALENT} within the margin); a disagreement is this run's "
        "result at its budget, shown as found, never tuned away."
    )
    return [
        Section(
            "Published findings, checked",
            intro=intro,
            tables=[Table("expectations", "What the literature expects, and what this run found", raw, view)],
        )
    ]
