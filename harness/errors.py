"""Typed errors. Every error a user can act on is an `AttnbenchError`.

The CLI turns these into one-line messages in exactly one place
(`attnbench.cli.main`); library code raises, never prints and exits.
"""

from __future__ import annotations

QUOTE_LIMIT = 200  # characters of a user's value that a message quotes


def shortened(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was (a value in a suite
    can be megabytes long; a message needs only enough of it to recognise it)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for a message, ``shortened``."""
    return shortened(repr(value), limit)


class AttnbenchError(Exception):
    """Base class: a problem the user can fix; the message says what, where and how."""


class PluginError(AttnbenchError):
    """A plugin failed to load, registered something invalid, or clashed with another."""


class PluginReferenceError(PluginError):
    """A ``"package.module:object"`` string a plugin registered names no importable callable
    (raised on first use: the module is missing, it lacks the object, or that is not callable)."""


class UnknownVariantError(AttnbenchError):
    """A variant name that no loaded plugin registered."""


class SuiteError(AttnbenchError):
    """A suite file that is malformed or invalid (message names file, line/key, fix)."""


class ModelSizeError(SuiteError):
    """A model size of a suite that a variant refuses: it breaks one of the variant's declared
    constraints, or the variant's builder raised at that size (found before any cell runs)."""


class StoreError(AttnbenchError):
    """The results store cannot be opened, migrated or written."""


class DataError(AttnbenchError):
    """A dataset or tokenizer that cannot be loaded."""


class TrainingError(AttnbenchError):
    """A training run that cannot continue (divergence, out-of-memory, bad checkpoint)."""


class CheckpointError(AttnbenchError):
    """A model checkpoint that is missing, unreadable, or cannot be rebuilt."""


class DiskFullError(AttnbenchError):
    """A file (a checkpoint, a resume state) that could not be written: its disk or quota is full."""

    def __init__(self, where: object, consequence: str = "nothing stored for this cell") -> None:
        self.where, self.consequence = str(where), consequence
        super().__init__(f"no space left on device at {where}; {consequence}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # pickles with both arguments
        return (DiskFullError, (self.where, self.consequence))


class CheckFailed(AttnbenchError):
    """A variant failed the trust gate and the suite does not allow failing variants."""


class DistributedError(AttnbenchError):
    """Data-parallel training (torchrun) that cannot start or is set up inconsistently."""


class ExecutorError(AttnbenchError):
    """A cell executor (e.g. Ray) that is not installed or cannot be reached."""


class ReportError(AttnbenchError):
    """A report that cannot be made: no store at the path, not a store, unknown suite."""


class ExportError(AttnbenchError):
    """A Hugging Face export that cannot be written (the hf extra missing, an existing folder)."""


class ModelArgsError(AttnbenchError):
    """lm-eval ``model_args`` the attnbench model does not accept (unknown name, bad value)."""


class MissingPackageError(AttnbenchError):
    """A suite needs an optional package this install lacks (refused before any cell runs)."""


class TrackerError(AttnbenchError):
    """An experiment tracker that is unknown or whose library is not installed."""


class DeviceError(AttnbenchError):
    """A device (--device, a suite's `device:`) that this machine does not have."""


class InspectError(AttnbenchError):
    """Attention maps that cannot be drawn: a variant without them, text that does not fit."""


class FinetuneError(AttnbenchError):
    """A fine-tuning cell that cannot start: no checkpoint, a rank or target that does not fit."""


class UsageError(AttnbenchError):
    """A command-line option or environment setting that cannot mean what it says."""


class DocumentTooLongError(AttnbenchError):
    """An lm-eval document longer than the checkpoint reads, refused rather than silently cut."""
