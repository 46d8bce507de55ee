"""Tokenizers: bytes (default), a byte-level BPE trained locally with HF `tokenizers`
(cached by corpus hash and vocabulary size), or a named pretrained tokenizer (online)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from attnbench.data.spec import BYTE_VOCAB, DataSpec
from attnbench.errors import DataError


class ByteTokenizer:
    name = "bytes"
    vocab_size = BYTE_VOCAB

    def encode(self, text: str) -> torch.Tensor:
        data = bytearray(text.encode("utf-8"))
        if not data:  # torch.frombuffer refuses an empty buffer
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(data, dtype=torch.uint8)  # (N,)

    def decode(self, tokens: torch.Tensor | list[int]) -> str:
        return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


class HFTokenizer:
    """Wraps a `tokenizers.Tokenizer`; ids are stored as int32."""

    def __init__(self, tok, name: str) -> None:
        self._tok, self.name = tok, name
        self.vocab_size = tok.get_vocab_size()

    def encode(self, text: str) -> torch.Tensor:
        ids = []
        for start in range(0, len(text), 1 << 20):  # 1 MB pieces keep memory flat
            ids.extend(self._tok.encode(text[start : start + (1 << 20)]).ids)
        return torch.tensor(ids, dtype=torch.int32)  # (N,)

    def decode(self, tokens: torch.Tensor | list[int]) -> str:
        return self._tok.decode([int(t) for t in tokens])

    def to_json(self) -> str:
        """The tokenizer.json text: kept in checkpoints so trained models can be evaluated and exported."""
        return self._tok.to_str()


class TokenIdsTokenizer:
    """The tokenizer of a token-id task (MQAR and the like): ids in, ids out. Text is the ids
    written out, whitespace-separated ("5 4099 12"); as a tokenizer.json, a word-level
    vocabulary "0".."V-1", so Hugging Face tokenizers read a model's ids the same way."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size, self.name = int(vocab_size), f"token-ids-{vocab_size}"

    def encode(self, text: str) -> torch.Tensor:
        try:
            ids = [int(word) for word in text.split()]
        except ValueError:
            raise DataError(
                f"this model reads token ids, not text: give ids 0..{self.vocab_size - 1} "
                f"separated by spaces (e.g. '5 12 3'), not {text[:40]!r}"
            ) from None
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise DataError(f"token ids must lie in 0..{self.vocab_size - 1}; got {text[:40]!r}")
        return torch.tensor(ids, dtype=torch.int64)  # (N,)

    def decode(self, tokens: torch.Tensor | list[int]) -> str:
        return " ".join(str(int(t)) for t in tokens)

    def to_json(self) -> str:
        """tokenizer.json text, kept in checkpoints (see ``token_ids_vocab``). Written as JSON
        here, not through HF ``tokenizers``: a token-id cell saves its checkpoint on the main
        install, which does not bring that package (Hugging Face tokenizers read it the same)."""
        return json.dumps(
            {
                "version": "1.0",
                "truncation": None,
                "padding": None,
                "added_tokens": [],
                "normalizer": None,
                "pre_tokenizer": {"type": "WhitespaceSplit"},
                "post_processor": None,
                "decoder": None,
                "model": {
                    "type": "WordLevel",
                    "vocab": {str(i): i for i in range(self.vocab_size)},
                    "unk_token": "[UNK]",
                },
            },
            separators=(",", ":"),
        )


def token_ids_vocab(tokenizer_json: str | None) -> int | None:
    """The vocabulary size when ``tokenizer_json`` is a ``TokenIdsTokenizer``'s, else None."""
    if tokenizer_json is None:
        return None
    model = json.loads(tokenizer_json).get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") != "WordLevel" or not isinstance(vocab, dict):
        return None
    return len(vocab) if vocab == {str(i): i for i in range(len(vocab))} else None


def tokenizer_kind(tokenizer_json: str | None) -> str:
    """How a checkpoint's model reads text: "bytes" (no tokenizer kept), "token-ids" or "trained"."""
    if tokenizer_json is None:
        return "bytes"
    return "token-ids" if token_ids_vocab(tokenizer_json) is not None else "trained"


def cache_dir() -> Path:
    root = os.environ.get("ATTNBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "attnbench"
    )
    return Path(root)


def train_bpe(text: str, vocab_size: int) -> HFTokenizer:
    """Byte-level BPE trained on `text`, cached under the cache dir by content hash."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as exc:
        raise DataError("tokenizer 'bpe' needs the `tokenizers` package: pip install 'attnbench[bpe]'") from exc
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
    path = cache_dir() / "tokenizers" / f"bpe-{vocab_size}-{digest}.json"
    if path.is_file():
        return HFTokenizer(Tokenizer.from_file(str(path)), f"bpe-{vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator((text[i : i + 100_000] for i in range(0, len(text), 100_000)), trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)
    return HFTokenizer(tok, f"bpe-{vocab_size}")


def pretrained_name(spec: DataSpec) -> str:
    """``tokenizer_name`` of a ``tokenizer: pretrained`` data spec (its validator requires one)."""
    if spec.tokenizer_name is None:
        raise DataError("tokenizer 'pretrained' needs 'tokenizer_name' (a hub name or a tokenizer.json)")
    return spec.tokenizer_name


def pretrained(name: str) -> HFTokenizer:
    """A named tokenizer: a local ``tokenizer.json`` (or a folder holding one), else a hub name."""
    local = Path(name).expanduser()
    if local.is_dir():
        local = local / "tokenizer.json"
    try:
        from tokenizers import Tokenizer

        if local.is_file():
            return HFTokenizer(Tokenizer.from_file(str(local)), name)
        return HFTokenizer(Tokenizer.from_pretrained(name), name)
    except Exception as exc:
        raise DataError(
            f"could not load pretrained tokenizer {name!r}: {exc}. Give a local tokenizer.json (or its "
            "folder) as tokenizer_name, or, offline, use tokenizer: bytes or bpe."
        ) from exc
