"""lm-eval ``!function`` hooks for the attnbench offline tasks in this folder.

lm-eval loads this file by path; the document builders live in ``harness.lm_eval_data``
(deterministic, no network), so the YAML files here stay declarative.
"""

from harness.lm_eval_data import heldout_text_dataset, recall_dataset

__all__ = ["heldout_text_dataset", "recall_dataset"]
