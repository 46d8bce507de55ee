"""Options of the text_recall task (``text_recall``), free of torch: the registration registers
them, the generator (``text_recall_data``) reads them."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import RecallOptions

BYTE_VOCAB = 256


@dataclass(frozen=True)
class TextRecallOptions(RecallOptions):
    """n_pairs: key-value pairs before the separator (1..26); n_queries: keys queried after
    it (1..n_pairs). The line length, and so seq_len, follows from both."""
