"""Tokenizers for export folders, as transformers' fast tokenizer files.

Byte-level models: a BPE with no merges over GPT-2's printable byte alphabet, where the
character of byte b has id b, behind a ByteLevel pre-tokenizer that does not split:
``encode(text)`` is then ``list(text.encode("utf-8"))``, attnbench's ``ByteTokenizer``.
BPE models: the trained tokenizer.json the checkpoint kept, unchanged.
The beginning-of-text token is the newline, the prefix attnbench's lm-eval model
conditions a document's first token on, so ``lm_eval --model hf`` scores the same way
(so ``decode(..., skip_special_tokens=True)`` drops newlines: decode without it).
Token-id task models (MQAR): the token-ids tokenizer.json the checkpoint kept ("5 12" <->
[5, 12]), without special tokens: the vocabulary has no newline and no spare id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from attnbench.data.tokenizers import token_ids_vocab, tokenizer_kind

PREFIX_TEXT = "\n"


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (what ByteLevel uses)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def byte_tokenizer_json() -> str:
    """tokenizer.json text of the byte-level tokenizer (ids = UTF-8 byte values)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: b for b, ch in byte_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def prefix_token_id(tokenizer_json: str | None) -> int:
    """Id of the newline (the document prefix); raises ValueError if it is not one token."""
    if tokenizer_json is None:
        return ord(PREFIX_TEXT)
    if token_ids_vocab(tokenizer_json) is not None:
        raise ValueError(
            "this model reads token ids of a synthetic task, with no newline to condition a "
            "document on; give prefix_token=ID"
        )
    from tokenizers import Tokenizer

    ids = Tokenizer.from_str(tokenizer_json).encode(PREFIX_TEXT, add_special_tokens=False).ids
    if len(ids) != 1:
        raise ValueError(f"the tokenizer encodes a newline as {len(ids)} tokens; give prefix_token=ID")
    return ids[0]


class UsedTokenizer(TypedDict):
    """What ``write_tokenizer`` wrote: the tokenizer's kind and the token lm-eval prefixes."""

    kind: str
    prefix_token: str | None  # None: a model of token ids, with no newline


def write_tokenizer(out_dir: Path, tokenizer_json: str | None, context: int) -> UsedTokenizer:
    """Write tokenizer.json and tokenizer_config.json into ``out_dir``; returns what it used."""
    from tokenizers import Tokenizer

    try:  # the defining module (transformers 5), not the package: see tests/test_tooling.py
        from transformers.tokenization_utils_tokenizers import PreTrainedTokenizerFast
    except ImportError:  # transformers 4
        from transformers.tokenization_utils_fast import PreTrainedTokenizerFast  # pyright: ignore[reportMissingImports]

    text = tokenizer_json if tokenizer_json is not None else byte_tokenizer_json()
    tok = Tokenizer.from_str(text)
    kind = tokenizer_kind(tokenizer_json)
    prefix = None if kind == "token-ids" else tok.id_to_token(prefix_token_id(tokenizer_json))
    # The newline doubles as bos (lm-eval's prefix), eos and pad: the vocabulary has no spare id.
    # split_special_tokens: text is always encoded as text, never matched against them.
    special = {} if prefix is None else {"bos_token": prefix, "eos_token": prefix, "pad_token": prefix}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **special,
        split_special_tokens=True,
        model_max_length=context,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(str(out_dir))
    json.loads((out_dir / "tokenizer.json").read_text())  # what was written parses
    return {"kind": kind, "prefix_token": prefix}
