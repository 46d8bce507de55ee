"""lm-eval ``!function`` hooks for the attnbench offline tasks in this folder.

lm-eval loads this file by path; the document builders live in ``attnbench.data.heldout``
(deterministic, no network), so the YAML files here stay declarative.
"""

from attnbench.data.heldout import heldout_text_dataset, recall_dataset

__all__ = ["heldout_text_dataset", "recall_dataset"]
