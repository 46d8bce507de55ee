"""Local data files checked when a suite is validated, before any compute: they exist,
can be read, are UTF-8 text, and hold enough bytes for one batch of the experiment's shape."""

from __future__ import annotations

import math
import os
from pathlib import Path

from attnbench.data.spec import DataSpec
from attnbench.errors import DataError, shortened

# The text corpus refuses fewer tokens than these (data/corpus.py); a batch needs seq_len + 1.
MIN_TRAIN_TOKENS, MIN_VAL_TOKENS = 1024, 256
_PROBE = 1 << 20  # bytes read to check the encoding: the head is enough to catch a binary file


def _paths(p: str | list[str]) -> list[Path]:
    return [Path(x) for x in ([p] if isinstance(p, str) else p)]


def _check_readable(path: Path, key: str, text: bool) -> int:
    """Bytes in ``path``; DataError naming the file, the key and the fix."""
    try:
        exists = path.is_file()
    except OSError as exc:  # a name too long for the file system, say
        raise DataError(
            f"data file {shortened(str(path))} cannot be looked up ({exc.strerror}); "
            f"fix 'data.{key}' (paths are relative to the suite file)"
        ) from None
    if not exists:
        raise DataError(f"data file {path} does not exist; fix 'data.{key}' (paths are relative to the suite file)")
    if not os.access(path, os.R_OK):
        raise DataError(f"data file {path} is not readable; fix its permissions (chmod u+r {path})")
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"data file {path} is empty; point 'data.{key}' at a file with text in it")
    if text:
        with open(path, "rb") as f:
            head = f.read(_PROBE)
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(head) - 4:  # not merely a character cut at the probe's end
                raise DataError(
                    f"data file {path} is not UTF-8 text (byte {exc.start} is 0x{head[exc.start]:02x}); "
                    f"'data.{key}' must name text files (convert it to UTF-8)"
                ) from None
    return size


def check_data_files(spec: DataSpec, seq_len: int | None) -> None:
    """Raise DataError if a local file of ``spec`` (paths resolved) cannot make one batch."""
    if spec.source not in ("text", "json", "parquet") or not spec.path:
        return
    text = spec.source == "text"
    train = sum(_check_readable(p, "path", text) for p in _paths(spec.path))
    val = sum(_check_readable(p, "val_path", text) for p in _paths(spec.val_path)) if spec.val_path else None
    if not text or spec.tokenizer != "bytes":
        return  # sizes in tokens are only known for byte-level text
    train_need = max(MIN_TRAIN_TOKENS, (seq_len or 0) + 1)
    val_need = max(MIN_VAL_TOKENS, (seq_len or 0) + 1)
    if val is not None:
        short = [(spec.path, train, train_need, "path")] + [(spec.val_path, val, val_need, "val_path")]
    else:  # the held-out part is the tail val_fraction of the file
        need = math.ceil(max(train_need / (1 - spec.val_fraction), val_need / spec.val_fraction))
        short = [(spec.path, train, need, "path")]
    for files, have, need, key in short:
        if have < need:
            raise DataError(
                f"data file(s) {files} hold {have} bytes; one batch of this experiment "
                f"(seq_len {seq_len}, val_fraction {spec.val_fraction}) needs at least {need} "
                f"bytes. Use a larger 'data.{key}' file or a smaller seq_len"
            )
