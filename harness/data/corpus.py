"""Training data for `train` experiments: text corpora and synthetic tasks.

Text sources: corpora shipped in the package (``source: builtin``), the offline default (the
running interpreter's standard-library sources, needs no download anywhere), local text / json
/ parquet files through HF ``datasets``, or a hub dataset by name when online. Tokens are bytes
by default; a locally trained BPE or a named pretrained tokenizer are options, and held-out
metrics are reported in bits per byte whatever the tokenizer. Synthetic tasks (``source:
task``) live in ``data/tasks.py``; ``data/loading.py`` picks between the two.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from attnbench.data.builtin import DEFAULT_BUILTIN, builtin_text
from attnbench.data.spec import DataSpec, EvalSet
from attnbench.data.tokenizers import ByteTokenizer, HFTokenizer, pretrained, pretrained_name, train_bpe
from attnbench.errors import DataError

_STDLIB_SKIP = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo"}


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # (N,) token ids (uint8 for bytes, int32 otherwise)
    val: torch.Tensor  # (M,) token ids
    vocab_size: int
    bytes_per_token: float  # held-out UTF-8 bytes per token: 1.0 for the byte tokenizer
    sha256: str  # of the training and held-out tokens, recorded with every run
    description: str
    tokenizer_json: str | None = None  # tokenizer.json of a trained/pretrained tokenizer; None: bytes
    test: torch.Tensor | None = None  # (K,) token ids of the test split, when the spec asks for one

    def train_batch(self, batch_size: int, seq_len: int, gen: torch.Generator):
        return sample_batch(self.train, batch_size, seq_len, gen)

    def eval_sets(self, batch_size: int, seq_len: int, max_tokens: int) -> list[EvalSet]:
        sets = [
            EvalSet({"split": "val"}, eval_batches(self.val, batch_size, seq_len, max_tokens), self.bytes_per_token)
        ]
        if self.test is not None:
            sets.append(
                EvalSet(
                    {"split": "test"}, eval_batches(self.test, batch_size, seq_len, max_tokens), self.bytes_per_token
                )
            )
        return sets


def stdlib_text(max_bytes: int) -> str:
    """The standard library's .py sources, sorted by path, concatenated up to max_bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _STDLIB_SKIP and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            try:
                text = (Path(dirpath) / name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            parts.append(text)
            total += len(text)
            if total >= max_bytes:
                return "".join(parts)[:max_bytes]
    return "".join(parts)


def _files(p: str | list[str]) -> list[str]:
    files = [p] if isinstance(p, str) else list(p)
    for f in files:
        if not Path(f).is_file():
            raise DataError(f"data file {f} does not exist; fix 'data.path' (paths are relative to the suite file)")
    return files


def _load_local(source: str, files: list[str], text_field: str) -> str:
    import datasets

    try:
        if source == "text":  # whole documents, line breaks kept
            ds = datasets.load_dataset("text", data_files=files, split="train", sample_by="document")
        else:
            ds = datasets.load_dataset(source, data_files=files, split="train")
    except Exception as exc:
        raise DataError(f"could not read {files} as {source}: {exc}") from exc
    field = "text" if source == "text" else text_field
    if field not in ds.column_names:
        raise DataError(f"{files}: no column {field!r} (columns: {ds.column_names}); set 'data.text_field'")
    return "\n".join(ds[field])


def _load_hub(spec: DataSpec, split: str) -> str:
    import datasets

    if spec.name is None:
        raise DataError("data source 'hf' needs 'name' (a hub dataset)")
    try:
        ds = datasets.load_dataset(spec.name, spec.config, split=split)
    except Exception as exc:
        offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (
            " The hub is switched off (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE); use a local "
            "'path' with source text/json/parquet."
            if offline
            else ""
        )
        raise DataError(f"could not load hub dataset {spec.name!r} ({spec.config}, {split}): {exc}.{hint}") from exc
    if spec.text_field not in ds.column_names:
        raise DataError(f"hub dataset {spec.name!r} has no column {spec.text_field!r}; set 'data.text_field'")
    return "\n".join(ds[spec.text_field])


def _texts(spec: DataSpec) -> tuple[str, str | None]:
    """(training text, held-out text or None to split the tail off)."""
    if spec.source == "builtin":
        return builtin_text(spec.name or DEFAULT_BUILTIN), None
    if spec.source == "stdlib":
        cap = spec.max_bytes or 4_000_000
        return stdlib_text(int(cap / (1 - spec.val_fraction))), None
    if spec.source == "hf":
        val = _load_hub(spec, spec.val_split) if spec.val_split else None
        return _load_hub(spec, spec.split), val
    if spec.path is None:
        raise DataError(f"data source {spec.source!r} needs 'path' (a local file or a list of files)")
    train = _load_local(spec.source, _files(spec.path), spec.text_field)
    val = _load_local(spec.source, _files(spec.val_path), spec.text_field) if spec.val_path else None
    return train, val


def split_text(spec: DataSpec) -> tuple[str, str, str | None]:
    """(train, val, test or None), as training cuts them. Cut from the corpus: train | val | test, in that order."""
    train_text, val_text = _texts(spec)
    test_text = _load_local(spec.source, _files(spec.test_path), spec.text_field) if spec.test_path else None
    if spec.test_fraction is not None and test_text is None:
        tail = spec.test_fraction if val_text is not None else spec.test_fraction + spec.val_fraction
        cut = int(len(train_text) * (1 - tail))
        train_text, rest = train_text[:cut], train_text[cut:]
        if val_text is None:  # val is the slice before the test tail
            split = int(len(rest) * spec.val_fraction / tail)
            val_text, test_text = rest[:split], rest[split:]
        else:
            test_text = rest
    if val_text is None:  # hold out the tail (cut on a character boundary)
        cut = int(len(train_text) * (1 - spec.val_fraction))
        train_text, val_text = train_text[:cut], train_text[cut:]
    if spec.max_bytes is not None:
        train_text = train_text.encode("utf-8")[: spec.max_bytes].decode("utf-8", errors="ignore")
    return train_text, val_text, test_text


def make_tokenizer(spec: DataSpec, train_text: str):
    if spec.tokenizer == "bpe":
        return train_bpe(train_text, spec.bpe_vocab_size)
    if spec.tokenizer == "pretrained":
        return pretrained(pretrained_name(spec))
    return ByteTokenizer()


def load_text_corpus(spec: DataSpec) -> Corpus:
    """A text corpus, tokenized (cached in-process per spec)."""
    return _load_cached(json.dumps(spec.model_dump(), sort_keys=True))


@functools.lru_cache(maxsize=8)
def _load_cached(spec_json: str) -> Corpus:
    spec = DataSpec.model_validate_json(spec_json)
    train_text, val_text, test_text = split_text(spec)
    tok = make_tokenizer(spec, train_text)
    train, val = tok.encode(train_text), tok.encode(val_text)  # (N,), (M,)
    test = tok.encode(test_text) if test_text is not None else None  # (K,)
    if len(train) < 1024 or len(val) < 256 or (test is not None and len(test) < 256):
        sizes = f"{len(train)} training / {len(val)} held-out" + (f" / {len(test)} test" if test is not None else "")
        raise DataError(f"corpus too small ({sizes} tokens)")
    bytes_per_token = len(val_text.encode("utf-8")) / len(val)
    digest = hashlib.sha256(
        train.numpy().tobytes()
        + b"\0"
        + val.numpy().tobytes()
        + (b"\0" + test.numpy().tobytes() if test is not None else b"")
    ).hexdigest()
    desc = {"hf": f"hf:{spec.name}/{spec.config}", "builtin": f"builtin:{spec.name or DEFAULT_BUILTIN}"}.get(
        spec.source, spec.source
    )
    if spec.path:
        desc += f":{spec.path}"
    return Corpus(
        train,
        val,
        tok.vocab_size,
        bytes_per_token,
        digest,
        f"{desc} [{tok.name}]",
        tokenizer_json=tok.to_json() if isinstance(tok, HFTokenizer) else None,
        test=test,
    )


def sample_batch(
    tokens: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs (B, T) and next-token targets (B, T), int64."""
    high = len(tokens) - seq_len - 1
    if high <= 0:
        raise DataError(f"corpus of {len(tokens)} tokens is shorter than seq_len {seq_len} + 1")
    ix = torch.randint(high, (batch_size,), generator=generator)  # (B,)
    win = tokens[ix[:, None] + torch.arange(seq_len + 1)].long()  # (B, T+1) gather of windows
    return win[:, :-1], win[:, 1:]


def eval_batches(
    tokens: torch.Tensor, batch_size: int, seq_len: int, max_tokens: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive non-overlapping held-out windows covering up to max_tokens targets."""
    n = min((len(tokens) - 1) // seq_len, max(1, max_tokens // seq_len))
    if n == 0:
        raise DataError(f"held-out split of {len(tokens)} tokens is shorter than seq_len {seq_len} + 1")
    x = tokens[: n * seq_len].long().view(n, seq_len)  # (n, T)
    y = tokens[1 : n * seq_len + 1].long().view(n, seq_len)  # (n, T)
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, n, batch_size)]
