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
NOT_LEARNED_AT_BUDGET = "not learned at this budget"
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

VOCABULARY: tuple[str, ...] = tuple(
    value for name, value in list(globals().items()) if name.isupper() and isinstance(value, str)
)
"""Every decision word above, as printed (fields in braces)."""
