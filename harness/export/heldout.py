"""Held-out text for lm-eval's ``attnbench_heldout_text`` task (``attnbench export ... --heldout-text
FILE``): the test (or validation) split of the text corpus a stored train run used, cut exactly as
its training cut it, so an exported model is scored on text it never trained on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.errors import ExportError

SPLITS = ("test", "val")


@dataclass(frozen=True)
class HeldoutText:
    path: Path
    split: str  # test | val
    corpus: str  # where the text came from, e.g. "builtin:tinyshakespeare"
    n_bytes: int


def _corpus_name(data: dict[str, Any]) -> str:
    source = data.get("source", "builtin")
    name = data.get("name") or data.get("path") or ("tinyshakespeare" if source == "builtin" else "")
    return f"{source}:{name}" if name else str(source)


def write_heldout_text(data: dict[str, Any], split: str, out: Path) -> HeldoutText:
    """Write the ``split`` (test or val) of the text corpus a run's ``data`` config describes to ``out``."""
    from attnbench.data.corpus import split_text
    from attnbench.data.spec import DataSpec

    if split not in SPLITS:
        raise ExportError(f"no held-out split {split!r}; give one of {', '.join(SPLITS)}")
    spec = DataSpec.model_validate(data)
    corpus = _corpus_name(data)
    if spec.source == "task":
        raise ExportError(
            f"the run trained on the synthetic task {spec.task!r}, not on text: there is no held-out text to "
            "write; leave out --heldout-text (its lm-eval task is attnbench_recall or the task's own)"
        )
    _, val, test = split_text(spec)
    text = test if split == "test" else val
    if text is None:
        raise ExportError(
            f"the run's corpus ({corpus}) holds out no test split (its data sets neither test_fraction nor "
            "test_path); give --split val for its validation split (it chose the learning rate, and was never "
            "trained on)"
        )
    out = out.expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    data_bytes = text.encode("utf-8")
    out.write_bytes(data_bytes)
    return HeldoutText(out, split, corpus, len(data_bytes))


def run_heldout_text(store: Any, cell_key: str | None, split: str, out: Path) -> HeldoutText:
    """Write the held-out ``split`` of the text the stored train run ``cell_key`` trained on."""
    if not cell_key:
        raise ExportError(
            "the checkpoint names no train cell, so its training text is unknown: --heldout-text needs a "
            "checkpoint that `attnbench run` kept"
        )
    runs = [r for r in store.runs() if r["cell_key"] == cell_key]
    if not runs:
        raise ExportError(
            f"the checkpoint's train cell {cell_key} is not in store {store.path}, so its training text is "
            "unknown: pass the --store it was trained into"
        )
    data = (runs[-1].get("config") or {}).get("data")
    if not isinstance(data, dict):
        raise ExportError(f"run {cell_key} in store {store.path} records no data config: no held-out text to write")
    return write_heldout_text(data, split, out)
