"""A suite's `data:` mapping, and the held-out set type both text and tasks produce."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # a suite validates without torch
    import torch


BYTE_VOCAB = 256  # UTF-8 bytes: the vocabulary of text read as bytes (tokenizer "bytes") and of byte-token tasks


class DataSpec(BaseModel):
    """Where the text comes from and how it is split (a suite's `data:` mapping)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    source: Literal["builtin", "stdlib", "text", "json", "parquet", "hf", "task"] = "builtin"
    """Where the text comes from: builtin (shipped corpora, Tiny Shakespeare by default), stdlib (this Python's
    standard library source), local text/json/parquet files, hf (a hub dataset), or task (a synthetic task)."""
    path: str | list[str] | None = None
    """Local training file(s), relative to the suite file (source: text, json, parquet)."""
    val_path: str | list[str] | None = None
    """Held-out validation file(s). None: the tail of the training text (val_fraction)."""
    test_path: str | list[str] | None = None
    """Test file(s) the protocol's reported numbers come from. None: test_fraction, or no test split."""
    test_fraction: float | None = Field(default=None, gt=0.0, lt=1.0)
    """Share of the corpus cut as a test slice, before the validation tail. None: test_path, or no test split."""
    name: str | None = None
    """Hub dataset name (source: hf), or which shipped corpus (source: builtin; default tinyshakespeare)."""
    config: str | None = None
    """Hub dataset configuration (source: hf)."""
    split: str = "train"
    """Hub split trained on (source: hf)."""
    val_split: str | None = None
    """Hub split held out for validation (source: hf). None: the tail of the training split."""
    text_field: str = "text"
    """Column holding the text (json, parquet, hf)."""
    val_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    """Share of the text held out at its tail for validation when no val_path or val_split is given."""
    max_bytes: int | None = Field(default=None, gt=0)
    """Cap on training text in bytes (the head of the corpus). None: all of it."""
    tokenizer: Literal["bytes", "bpe", "pretrained"] = "bytes"
    """bytes (UTF-8 bytes, so bits per byte compare across everything), bpe (trained locally on the training text), or
    pretrained (tokenizer_name)."""
    bpe_vocab_size: int = Field(default=4096, ge=260)
    """Vocabulary size of the locally trained BPE (tokenizer: bpe)."""
    tokenizer_name: str | None = None
    """The tokenizer of tokenizer: pretrained: a hub name, or a tokenizer.json / folder relative to the suite file."""
    task: str | None = None
    """Registered task name (source: task; `attnbench list`)."""
    task_options: dict[str, Any] = {}
    """The task's options (e.g. {num_kv_pairs: 8}); {}: its defaults."""
    train_examples: int = Field(default=20000, gt=0)
    """Synthetic training examples generated (source: task)."""
    val_examples: int = Field(default=1000, gt=0)
    """Synthetic validation examples generated (source: task)."""
    test_examples: int | None = Field(default=None, gt=0)
    """Synthetic test examples, generated under their own seed (source: task). None: no test split."""
    train_settings: list[dict[str, Any]] = []
    """Task option overrides mixed in equal parts into the training examples (e.g. several numbers of pairs). []:
    task_options alone."""
    eval_settings: list[dict[str, Any]] = []
    """Task option overrides, each evaluated as its own held-out set (e.g. growing numbers of pairs). []: task_options
    alone."""

    @model_validator(mode="after")
    def _needs(self) -> DataSpec:
        if self.source == "task" and not self.task:
            raise ValueError("data source 'task' needs 'task' (a registered task name; see `attnbench list`)")
        if self.tokenizer == "pretrained" and not self.tokenizer_name:
            raise ValueError("tokenizer 'pretrained' needs 'tokenizer_name'")
        if self.source in ("text", "json", "parquet") and not self.path:
            raise ValueError(f"data source {self.source!r} needs 'path' (a local file or list of files)")
        if self.source == "hf" and not self.name:
            raise ValueError("data source 'hf' needs 'name' (a hub dataset name)")
        self._splits_disjoint()
        return self

    def has_test(self) -> bool:
        """Whether this spec defines a test split (protocol numbers are reported on it)."""
        if self.source == "task":
            return self.test_examples is not None
        return self.test_path is not None or self.test_fraction is not None

    def _splits_disjoint(self) -> None:
        """Train, val and test files must differ: an overlap would leak into the choice or the test."""

        def files(p: str | list[str] | None) -> set[str]:
            return set() if p is None else {str(Path(x)) for x in ([p] if isinstance(p, str) else p)}

        train, val, test = files(self.path), files(self.val_path), files(self.test_path)
        for a, b, name, fix in (
            (train, val, "val_path", "path"),
            (train, test, "test_path", "path"),
            (val, test, "test_path", "val_path"),
        ):
            if a & b:
                raise ValueError(
                    f"data.{name} {sorted(a & b)} is also in data.{fix}: the splits must not "
                    f"overlap; give a separate file, or leave {name} out to cut a slice of the corpus"
                )
        if self.test_path is not None and self.test_fraction is not None:
            raise ValueError("give data.test_path or data.test_fraction, not both")
        if self.test_fraction is not None and self.val_path is None and self.val_fraction + self.test_fraction >= 0.9:
            raise ValueError(
                f"data.val_fraction + data.test_fraction ({self.val_fraction + self.test_fraction:g}) "
                "leaves under 10% for training; lower them"
            )

    def resolved(self, base_dir: Path) -> DataSpec:
        """Paths made absolute against the suite's folder."""

        def fix(p: str | list[str] | None) -> str | list[str] | None:
            if p is None:
                return None
            if isinstance(p, list):
                return [str((base_dir / x).resolve()) for x in p]
            return str((base_dir / p).resolve())

        return self.model_copy(
            update={
                "path": fix(self.path),
                "val_path": fix(self.val_path),
                "test_path": fix(self.test_path),
                "tokenizer_name": self._tokenizer_file(base_dir),
            }
        )

    def _tokenizer_file(self, base_dir: Path) -> str | None:
        """A tokenizer_name that names a file or folder beside the suite, made absolute; a hub
        name (nothing there) is kept as written."""
        name = self.tokenizer_name
        if name is None or Path(name).is_absolute():
            return name
        local = (base_dir / Path(name).expanduser()).resolve()
        return str(local) if local.exists() else name


@dataclass(frozen=True)
class EvalSet:
    """Held-out batches evaluated together; ``tags`` go on every row they produce."""

    tags: dict[str, Any]
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    bytes_per_token: float | None  # None when bits per byte do not apply (tasks)
    scored: str = "all"  # "all" tokens, or "answers" only (tasks: accuracy is reported)
