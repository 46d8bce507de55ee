"""The report's decision words: every word or phrase it prints as the outcome of a comparison, a
test or a threshold, in one place. A field in braces is filled in where the word is printed
("learned on {k} of {n} seeds"). docs/protocol.md defines each in its words table, and
tests/test_decision_words.py fails when the two disagree or the report prints a word the table lacks."""

from __future__ import annotations

# The paired comparison on the protocol's metric (report/decision.py, report/paired.py).
BETTER = "better"
WORSE = "worse"
EQUIVALENT = "equivalent"  # the outcome code (summary.csv's decision column)
EQUIVALENT_WITHIN = "equivalent within ±{margin}"
EQUIVALENT_SHORT = "equivalent ±{margin}"  # the first screen's per-setting list
WITHIN_MARGIN = "(within ±{margin})"  # added to a detected difference that is also inside the margin
UNDETERMINED = "undetermined"
NO_PAIRED_SEEDS = "no paired seeds"
NO_INTERVAL = "no interval"  # the outcome code of protocol.interval: false
NO_INTERVAL_REQUESTED = "no interval requested (protocol.interval: false)"
BASELINE = "baseline"  # the baseline's own row

# A decision on fresh seeds (report/replication.py).
REPEATED = "repeated"
REPLICATION_UNDETERMINED = "undetermined on fresh seeds"
REVERSED = "reversed"
NOT_REPEATED = "not repeated"
NOT_REPLICATED = "not replicated"

# Learned before compared (learning.py, report/learned.py).
LEARNED = "learned"
NOT_LEARNED = "not learned"
BASELINE_NOT_LEARNED = "baseline not learned"
SPLIT = "learned on some seeds"  # the status code of a row whose seeds split
LEARNED_ON = "learned on {k} of {n} seeds"
UNKNOWN = "unknown"  # no null level stored
BASELINE_SPLIT = "baseline learned on some seeds"  # the outcome code where the baseline's seeds split alone
NOT_LEARNED_AT_BUDGET = "not learned at this budget"
BASELINE_NOT_LEARNED_AT_BUDGET = "baseline not learned at this budget"
BELOW_NGRAM = "below the {order} ({value}) on {k} of {n} seeds"  # text: the trigram and the 4-gram

# The share of learned seeds (learning.py).
LEARNS_ON_FEWER = "learns on fewer seeds"
LEARNS_ON_MORE = "learns on more seeds"
SHARE_UNDETERMINED = "share undetermined"
CANNOT_DECIDE = "cannot decide with {n1} vs {n2} seeds"  # also the time-to-learn log-rank

# What an experiment's numbers mean at its budget, on the first screen (report/headline.py).
DECIDED_AT = "decided at final {metric}"
DECIDED_WHERE_LEARNED = "decided at final {metric} where both learned on every seed"
DECIDED_ON_SHARE = "seeds split across the null level: decided on the share of seeds that learned"
UNDETERMINED_AT = "undetermined at final {metric}"
NO_FINAL_DECISION = "no final {metric} decided at this budget"  # also the time-to-learn sentence's head
FAILED_NO_SEED = "failed: no seed finished"
DIVERGED_NO_SEED = "diverged: no seed finished"
NO_RUN_FINISHED = "no run of {experiment} finished"  # a failed experiment's section

# Published findings (report/expectations.py); NOT_RUN also an anchor that did not run.
AGREES = "agrees"
DISAGREES = "disagrees"
NOT_TESTABLE = "not testable at this budget"
NOT_RUN = "not run"

# Time to learn (report/time_to_learn.py); CANNOT_DECIDE above.
FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no difference detected"
NEITHER_REACHED = "neither reached it"
DID_NOT_REACH = "did not reach {target} in {budget} {unit}"
MEDIAN_NOT_REACHED = "median not reached in {budget} {unit}"
NOT_REACHED = "not reached"  # an interval limit

# Speed (report/ratios.py, report/speed.py).
RATIO_FASTER = "{ratio}x faster"
RATIO_SLOWER = "{ratio}x slower"
NO_SPEED_DIFFERENCE = "no speed difference detected"
FASTER_FROM = "faster from T={T}"
FASTER_AT_EVERY_T = "faster at every compared T"
NEVER_FASTER = "never faster at the compared T"
NO_SPEED_BASELINE = "no softmax baseline measured"

# Scaling fits (report/scaling_fits.py); UNDETERMINED and WITHIN_MARGIN above.
STEEPER = "steeper"
SHALLOWER = "shallower"
SCALES_LIKE = "scales like {baseline} (within ±{margin})"
MISFIT_ONE = "the law of {variant} misses its sizes: this compares trends, not laws"
MISFIT_MANY = "the laws of {variants} miss their sizes: this compares trends, not laws"
FITS = "fits"
DOES_NOT_FIT = "does not fit"
NO_SEED_SPREAD = "no seed spread to judge misses by"
IRREDUCIBLE_NEEDED = "irreducible term needed"
IRREDUCIBLE_NOT_SUPPORTED = "irreducible term not supported"

# The trust gate (report/gate.py) and the public anchors (report/anchors.py).
GATE_PASSED = "passed"
GATE_FAILED = "FAILED {checks}"
GATE_NOT_RECORDED = "not recorded"
CHECK_PASS = "pass"
CHECK_FAIL = "FAIL"
CHECK_ERROR = "ERROR"
CHECK_SKIP = "skip"
CONFIGURATION_DIFFERS = "configuration differs"
ANCHOR_RUN_STATUS = "run {status}"

# A row's learned state is what its own seeds did against the null level: every seed learned,
# k of n, or none (attnbench.stats.learned counts them). The outcome code of a comparison not made
# on the metric names whose state stopped it, so no word printed about a row claims another state.
NOT_COMPARED = (NOT_LEARNED, BASELINE_NOT_LEARNED, SPLIT, BASELINE_SPLIT)
"""The outcome codes of a comparison a learned state stopped (summary.csv's decision)."""
DECIDED = (BETTER, WORSE, EQUIVALENT)
"""The outcome codes of a comparison decided on the metric."""
STATE_WORDS: dict[str, tuple[str, ...]] = {
    LEARNED: (LEARNED,),
    SPLIT: (SPLIT, LEARNED_ON),
    NOT_LEARNED: (NOT_LEARNED, NOT_LEARNED_AT_BUDGET),
}
"""The words a row may print of its own seeds in each learned state, and in no other."""


def learned_state(k: int, n: int) -> str:
    """The state of a row ``k`` of whose ``n`` seeds learned: learned, not learned, or split."""
    return LEARNED if k == n else NOT_LEARNED if k == 0 else SPLIT


def own_words(state: str, k: int, n: int) -> str:
    """What a row says of its own seeds: 'learned', 'learned on 2 of 3 seeds', 'not learned', 'unknown'."""
    return LEARNED_ON.format(k=k, n=n) if state == SPLIT else state


def not_compared(mine: str, theirs: str) -> str | None:
    """The outcome code where the variant's (``mine``) or the baseline's learned state stops the
    comparison on the metric; None where both learned on every seed (or a state is unknown).
    A baseline that learned on no seed stops it first; a code names the baseline's state only
    with "baseline", so "not learned" and "learned on some seeds" always describe the row itself."""
    if theirs == NOT_LEARNED:
        return BASELINE_NOT_LEARNED
    if mine in (NOT_LEARNED, SPLIT):
        return mine
    return BASELINE_SPLIT if theirs == SPLIT else None


def short_outcome(code: str, margin: float | None, k: int, n: int) -> str:
    """A row's decision in a few words (the verdict cell, the first screen's per-setting list):
    'worse', 'equivalent ±0.05', 'baseline not learned', 'learned on 2 of 3 seeds' (``k`` of
    ``n``: the row's own learned seeds)."""
    if code == EQUIVALENT and margin is not None:
        return EQUIVALENT_SHORT.format(margin=f"{margin:g}")
    return own_words(SPLIT, k, n) if code == SPLIT else code


def budget_words(metric: str, codes: list[str], states: list[str]) -> str:
    """What a variant's numbers in one experiment mean at this budget, from its rows' outcome
    ``codes`` and its own learned ``states`` (overall and per setting): decided at final quality,
    decided on the share of learned seeds, not learned (the variant on no row), baseline not
    learned (on every row), no final decision (rows stopped for different reasons), or undetermined."""
    stopped = [c in NOT_COMPARED for c in codes]
    if any(c in DECIDED for c in codes):
        return (DECIDED_WHERE_LEARNED if any(stopped) else DECIDED_AT).format(metric=metric)
    if any(c in (SPLIT, BASELINE_SPLIT) for c in codes):
        return DECIDED_ON_SHARE
    if states and all(s == NOT_LEARNED for s in states):
        return NOT_LEARNED_AT_BUDGET
    if codes and all(c == BASELINE_NOT_LEARNED for c in codes):
        return BASELINE_NOT_LEARNED_AT_BUDGET
    return (NO_FINAL_DECISION if any(stopped) else UNDETERMINED_AT).format(metric=metric)


VOCABULARY: tuple[str, ...] = tuple(
    value for name, value in list(globals().items()) if name.isupper() and isinstance(value, str)
)
"""Every decision word above, as printed (fields in braces)."""
