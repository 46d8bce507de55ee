"""Loading the data a spec describes: a text corpus, or a synthetic task's examples."""

from __future__ import annotations

from attnbench.data.corpus import Corpus, load_text_corpus
from attnbench.data.spec import DataSpec
from attnbench.data.tasks import TaskData, load_task_data


def load_corpus(spec: DataSpec, registry=None) -> Corpus | TaskData:
    """Load (and cache in-process) the data a resolved spec describes: a text ``Corpus``,
    or for ``source: task`` a ``TaskData`` (needs the registry that holds the task)."""
    if spec.source == "task":
        return load_task_data(spec, registry)
    return load_text_corpus(spec)
