"""lm-eval ``!function`` hooks for the attnbench offline tasks in this folder.

lm-eval loads this file by path; the document builders live in ``attnbench.data.heldout``
and ``attnbench.data.needle`` (deterministic, no network), so the YAML files here stay declarative.
"""

from attnbench.data.heldout import heldout_text_dataset, recall_dataset
from attnbench.data.needle import number_dataset, passkey_dataset, uuid_dataset

__all__ = ["heldout_text_dataset", "number_dataset", "passkey_dataset", "recall_dataset", "uuid_dataset"]
