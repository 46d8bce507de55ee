"""Needle-in-a-haystack examples (the S-NIAH family of RULER), generated offline as text.

One example is ``haystack-with-needles + question + answer``, exactly ``seq_len + 1`` bytes::

    ...haystack... The pass key of kel is 48213. ...haystack... The pass key of kel is 48213

A needle reads ``The {noun} of {key} is {value}. ``; the question repeats its prefix
(``The {noun} of {key} is ``) and the answer is the value. With ``n_keys`` > 1 the other
needles carry distinct keys (distractors) and one key is queried. The queried needle starts at
character ``round(depth * H)`` of the haystack (H its length), so depth 0 is the start of the
context and depth 1 the end; distractors sit at uniform random offsets.

Haystacks: ``repeat`` (one sentence repeated, S-NIAH-1) or ``corpus`` (a random slice of the
shipped public-domain corpus, S-NIAH-2 and -3). Deterministic from a seed; ASCII throughout,
so one byte is one character.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

from attnbench.data.builtin import DEFAULT_BUILTIN, builtin_text

REPEATED = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
KEY_LETTERS = 3  # keys are three lower-case letters ("kel")
_EVAL_SEED_OFFSET = 7_000_003  # lm-eval documents: a seed stream training never uses


@dataclass(frozen=True)
class NeedleKind:
    """What the needle holds: its noun, and how a value of ``length`` characters is drawn."""

    noun: str
    alphabet: str
    first: str  # alphabet of the first character (no leading zero for numbers)
    dash_every: int = 0  # "3f2a-9c1e": a dash after every this many characters (0: none)

    def value(self, rng: random.Random, length: int) -> str:
        chars = [rng.choice(self.first)] + [rng.choice(self.alphabet) for _ in range(length - 1)]
        if self.dash_every:
            chars = [
                c + ("-" if (i + 1) % self.dash_every == 0 and i + 1 < length else "") for i, c in enumerate(chars)
            ]
        return "".join(chars)

    def value_chars(self, length: int) -> int:
        """Characters of a value of ``length`` drawn symbols (dashes included)."""
        return length + ((length - 1) // self.dash_every if self.dash_every else 0)


NEEDLE_KINDS = {
    "passkey": NeedleKind("pass key", string.digits, "123456789"),
    "number": NeedleKind("number", string.digits, "123456789"),
    "uuid": NeedleKind("code", "0123456789abcdef", "0123456789abcdef", dash_every=4),
}


def needle_text(kind: NeedleKind, key: str, value: str) -> str:
    return f"The {kind.noun} of {key} is {value}. "


def question_text(kind: NeedleKind, key: str) -> str:
    return f"The {kind.noun} of {key} is "


def layout_chars(kind: NeedleKind, value_len: int, n_keys: int) -> int:
    """Characters every example spends on needles, question and answer (the rest is haystack)."""
    key = "k" * KEY_LETTERS
    value = "0" * kind.value_chars(value_len)
    return n_keys * len(needle_text(kind, key, value)) + len(question_text(kind, key)) + len(value)


def haystack(source: str, rng: random.Random, chars: int) -> str:
    """``chars`` characters of filler: the repeated sentence, or a random slice of the corpus."""
    if source == "repeat":
        return (REPEATED * (chars // len(REPEATED) + 1))[:chars]
    text = builtin_text(DEFAULT_BUILTIN)
    start = rng.randrange(len(text) - chars)
    return text[start : start + chars]


@dataclass(frozen=True)
class NeedleExample:
    text: str  # the whole example: context + answer, seq_len + 1 characters
    answer: str  # the value asked for (the last len(answer) characters of text)
    depth: float  # where the queried needle sits (fraction of the haystack)
    needle_at: int  # character offset of the queried needle in text


def needle_example(
    rng: random.Random, kind: str, seq_len: int, depth: float, n_keys: int, value_len: int, source: str
) -> NeedleExample:
    """One example of ``seq_len + 1`` characters (inputs: the first seq_len, targets shifted by one)."""
    nk = NEEDLE_KINDS[kind]
    h = seq_len + 1 - layout_chars(nk, value_len, n_keys)  # haystack characters
    if h < 0:
        raise ValueError(
            f"{n_keys} needle(s), question and answer need {layout_chars(nk, value_len, n_keys)} characters, "
            f"more than seq_len + 1 = {seq_len + 1}; raise seq_len or lower n_keys / value_len"
        )
    keys = _distinct_keys(rng, n_keys)
    values = [nk.value(rng, value_len) for _ in keys]
    queried = rng.randrange(n_keys)
    offsets = [round(depth * h) if i == queried else rng.randint(0, h) for i in range(n_keys)]
    hay = haystack(source, rng, h)
    parts, last, needle_at = [], 0, 0
    for i in sorted(range(n_keys), key=lambda i: (offsets[i], i != queried)):
        parts.append(hay[last : offsets[i]])
        if i == queried:
            needle_at = sum(len(p) for p in parts)
        parts.append(needle_text(nk, keys[i], values[i]))
        last = offsets[i]
    parts.append(hay[last:])
    text = "".join(parts) + question_text(nk, keys[queried]) + values[queried]
    return NeedleExample(text, values[queried], depth, needle_at)


def _distinct_keys(rng: random.Random, n: int) -> list[str]:
    keys: list[str] = []
    while len(keys) < n:
        key = "".join(rng.choice(string.ascii_lowercase) for _ in range(KEY_LETTERS))
        if key not in keys:
            keys.append(key)
    return keys


def needle_docs(
    n_docs: int, seed: int, kind: str, seq_len: int, depths: list[float], n_keys: int, value_len: int, source: str
) -> list[dict[str, Any]]:
    """lm-eval documents: ``context`` (all but the answer), ``answer``, and the needle's depth;
    depths cycle over ``depths``. Seeds are disjoint from the training task's."""
    rng = random.Random(_EVAL_SEED_OFFSET + seed)
    docs = []
    for i in range(n_docs):
        ex = needle_example(rng, kind, seq_len, depths[i % len(depths)], n_keys, value_len, source)
        docs.append({"context": ex.text[: -len(ex.answer)], "answer": ex.answer, "depth": ex.depth})
    return docs


NEEDLE_DEFAULTS = {  # per task: value length and haystack
    "passkey": (5, "repeat"),
    "number": (7, "corpus"),
    "uuid": (8, "corpus"),
}


def needle_dataset(
    kind: str = "passkey",
    n_docs: int = 100,
    seed: int = 0,
    seq_len: int = 256,
    depths: Any = (0.0, 0.25, 0.5, 0.75, 1.0),
    n_keys: int = 1,
    **_: Any,
) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` for the needle tasks (metadata: kind, n_docs, seed, seq_len,
    depths, n_keys): generated here, nothing downloaded."""
    import datasets

    value_len, source = NEEDLE_DEFAULTS[kind]
    depth_list = [float(d) for d in (depths if isinstance(depths, (list, tuple)) else [depths])]
    docs = needle_docs(int(n_docs), int(seed), kind, int(seq_len), depth_list, int(n_keys), value_len, source)
    return {"test": datasets.Dataset.from_list(docs)}


def passkey_dataset(**metadata: Any) -> dict[str, Any]:
    return needle_dataset(**{**metadata, "kind": "passkey"})


def number_dataset(**metadata: Any) -> dict[str, Any]:
    return needle_dataset(**{**metadata, "kind": "number"})


def uuid_dataset(**metadata: Any) -> dict[str, Any]:
    return needle_dataset(**{**metadata, "kind": "uuid"})
