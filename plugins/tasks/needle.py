"""Needle retrieval (RULER's S-NIAH family) as byte-level tasks, generated offline.

* ``niah_passkey`` (S-NIAH-1): a digit pass key in a repeated-sentence haystack;
* ``niah_number`` (S-NIAH-2): a 7-digit number in natural text (the shipped corpus);
* ``niah_uuid`` (S-NIAH-3): a UUID-like hex code ("3f2a-9c1e") in natural text.

Each example is ``seq_len + 1`` bytes of text (layout: ``attnbench.data.needle``): the
haystack holding ``n_keys`` needles, then the question, then the queried value. Inputs are
the first ``seq_len`` bytes, targets the next byte, and only the value's bytes are scored,
so accuracy is per answer byte; an example counts as retrieved when all its answer bytes
are right under teacher forcing (the ``exact`` rows of a length evaluation). The generator
lives in ``attnbench.plugins.tasks.needle_data``, the options in ``needle_options``; this module
registers the tasks without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnbench import Task, hookimpl
from attnbench.plugins.tasks.needle_options import NeedleOptions, NumberOptions, UuidOptions

if TYPE_CHECKING:
    from attnbench import TaskBatch

BYTE_VOCAB = 256


def _generate(options: Any, n: int, seed: int) -> TaskBatch:
    from attnbench.plugins.tasks.needle_data import generate  # torch loads with the data, not the registration

    return generate(options, n, seed)


def coords(options: NeedleOptions) -> dict[str, Any]:
    depth = options.depth if not isinstance(options.depth, tuple) else "mixed"
    return {"seq_len": options.seq_len, "depth": depth, "n_keys": options.n_keys}


# Null predictors: the position majority and the most frequent answer byte seen so far. The copy
# predictors are left out: at a fixed depth the value sits at fixed positions, so copying from
# there (copy_by_rank scores 1.0 at depth 0) is the retrieval under test, not a null.
_NULLS = ("position_majority", "answer_frequency")


def _task(name: str, options: type[NeedleOptions], description: str) -> Task:
    return Task(
        name,
        options,
        _generate,
        vocab_size=lambda o: BYTE_VOCAB,
        seq_len=lambda o: o.seq_len,
        description=description,
        coords=coords,
        version="1",
        tokens="bytes",
        null_predictors=_NULLS,
    )


@hookimpl
def attnbench_register_tasks(register) -> None:
    register(_task("niah_passkey", NeedleOptions, "S-NIAH-1: a digit pass key in a repeated-sentence haystack"))
    register(_task("niah_number", NumberOptions, "S-NIAH-2: a 7-digit number in natural text (shipped corpus)"))
    register(_task("niah_uuid", UuidOptions, "S-NIAH-3: a UUID-like hex code in natural text (shipped corpus)"))
