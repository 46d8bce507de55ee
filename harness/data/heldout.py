"""Documents for the offline lm-eval tasks shipped in ``suites/lm_eval_tasks``.

* Held-out text: one document per local text file, scored with ``loglikelihood_rolling``
  (word / byte perplexity, bits per byte). The path comes from the task's metadata
  (``text_path``), made absolute before lm-eval sees it.
* Associative recall (MQAR-style, in text so any byte-level model reads it): key-value
  pairs, a separator, then queries whose answers are the values bound to their keys::

      d7 k2 a9 q4 m0 x2 e5 b8 | k2 q4 d7 a

  A document is the line up to a query key; the choices are the ten digits, so chance is
  exactly 1/10 whatever the context. ``recall_corpus`` writes training lines in the same
  format (from a disjoint seed stream), so a model can be trained on it as plain text.

Each builder is deterministic in its seed and returns ``{"test": datasets.Dataset}``, the
shape lm-eval's ``custom_dataset`` hook expects. Keyword arguments that a builder does not
use are ignored: lm-eval passes the whole task metadata (model arguments included).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEYS = string.ascii_lowercase
VALUES = string.digits
SEPARATOR = "|"
_EVAL_SEED_OFFSET = 7_919_000  # eval documents come from a seed stream training never uses


@dataclass(frozen=True)
class RecallOptions:
    """Difficulty of the recall task: pairs in context and queries after the separator."""

    n_pairs: int = 8
    n_queries: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.n_pairs <= len(KEYS):
            raise ValueError(f"n_pairs must be in [1, {len(KEYS)}], got {self.n_pairs}")
        if not 1 <= self.n_queries <= self.n_pairs:
            raise ValueError(f"n_queries must be in [1, n_pairs={self.n_pairs}], got {self.n_queries}")


def recall_example(rng: random.Random, options: RecallOptions) -> tuple[list[tuple[str, str]], list[str]]:
    """(key-value pairs with distinct keys, queried keys: distinct, drawn from the pairs)."""
    keys = rng.sample(KEYS, options.n_pairs)
    pairs = [(k, rng.choice(VALUES)) for k in keys]
    queries = rng.sample(keys, options.n_queries)
    return pairs, queries


def recall_line(pairs: list[tuple[str, str]], queries: list[str]) -> str:
    """One full example: every query followed by its answer."""
    table = dict(pairs)
    head = " ".join(k + v for k, v in pairs)
    tail = " ".join(q + table[q] for q in queries)
    return f"{head} {SEPARATOR} {tail}\n"


def recall_corpus(n_lines: int, seed: int = 0, **options: Any) -> str:
    """Training text: ``n_lines`` full examples (seeds disjoint from the eval documents)."""
    opts = RecallOptions(**options)
    rng = random.Random(seed)
    return "".join(recall_line(*recall_example(rng, opts)) for _ in range(n_lines))


def recall_training_tensors(n_lines: int, seed: int = 0, **options: Any) -> tuple[Any, Any]:
    """MQAR-style training examples as bytes: inputs (N, T) and targets (N, T), int64, where
    only the answers (the value after each query key) are scored and every other target
    is -100. Lines have equal length for given options, so examples align at position 0."""
    import torch

    opts = RecallOptions(**options)
    rng = random.Random(seed)
    lines = [recall_line(*recall_example(rng, opts)) for _ in range(n_lines)]
    data = torch.tensor([list(line.encode("ascii")) for line in lines])  # (N, T + 1)
    inputs, targets = data[:, :-1], data[:, 1:].clone()  # (N, T), (N, T)
    first = lines[0].index(SEPARATOR) + 3  # char index of the first answer: "| k" then the value
    answer = torch.zeros(targets.size(1), dtype=torch.bool)  # (T,)
    answer[first - 1 :: 3] = True  # target t predicts char t + 1; answers every 3 chars
    targets[:, ~answer] = -100
    return inputs, targets


def recall_docs(n_docs: int, seed: int = 0, **options: Any) -> list[dict[str, Any]]:
    """Multiple-choice documents: context up to one query key, the ten digits as choices.

    The queried position is drawn per document, so earlier answered queries are part of
    the context exactly as in the training lines.
    """
    opts = RecallOptions(**options)
    rng = random.Random(_EVAL_SEED_OFFSET + seed)
    docs = []
    for _ in range(n_docs):
        pairs, queries = recall_example(rng, opts)
        j = rng.randrange(len(queries))
        table = dict(pairs)
        line = recall_line(pairs, queries)
        prefix = line[: line.index(SEPARATOR)]  # "k1v1 ... kNvN "
        answered = "".join(q + table[q] + " " for q in queries[:j])
        context = f"{prefix}{SEPARATOR} {answered}{queries[j]}"
        docs.append({"context": context, "choices": list(VALUES), "gold": VALUES.index(table[queries[j]])})
    return docs


def _dataset(rows: list[dict[str, Any]]) -> dict[str, Any]:
    import datasets

    return {"test": datasets.Dataset.from_list(rows)}


def recall_dataset(n_docs: int = 500, seed: int = 0, n_pairs: int = 8, n_queries: int = 4, **_: Any) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` for the recall task (metadata: n_docs, seed, n_pairs, n_queries)."""
    return _dataset(recall_docs(int(n_docs), int(seed), n_pairs=int(n_pairs), n_queries=int(n_queries)))


def resolve_text_path(text_path: str | None, config_source: str | None = None) -> Path:
    """The held-out file: absolute as given, else relative to the task's YAML folder."""
    if not text_path:
        raise ValueError(
            "the held-out text task needs a file: pass its path as task metadata 'text_path' "
            '(lm-eval: --metadata \'{"text_path": "/abs/heldout.txt"}\'; a suite: '
            "lm_eval.paths: {text_path: heldout.txt})"
        )
    path = Path(text_path).expanduser()
    if not path.is_absolute() and config_source and config_source not in ("inline", "unknown"):
        path = Path(config_source).parent / path
    if not path.is_file():
        raise ValueError(f"held-out text file {path} does not exist; fix the 'text_path' metadata")
    return path.resolve()


def heldout_text_dataset(text_path: str | None = None, config_source: str | None = None, **_: Any) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` for the held-out text task: one document, the whole file
    (read as UTF-8, byte for byte, so lm-eval counts exactly the bytes the harness does)."""
    path = resolve_text_path(text_path, config_source)
    text = path.read_bytes().decode("utf-8")
    if not text:
        raise ValueError(f"held-out text file {path} is empty")
    return _dataset([{"text": text}])
