"""Paths in a suite resolve against the suite file, wherever the command runs from; the
default corpus is the shipped English text."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.data.spec import DataSpec
from tests.helpers import run_cli, write_suite

SUITE = """
version: 1
name: paths
experiments:
  - name: text
    kind: train
    variants: [softmax]
    models: [{d_model: 32, n_layer: 1, n_head: 2}]
    data: {source: text, path: corpus/train.txt, val_path: corpus/val.txt,
           tokenizer: pretrained, tokenizer_name: tok/tokenizer.json}
    train: {budget: {steps: 2}, batch_size: 2, seq_len: 16, eval_interval: 2, eval_tokens: 64,
            checkpoint_interval: 0, checkpoint: false}
"""


def _tokenizer(path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path.parent.mkdir(parents=True)
    tok.save(str(path))


def test_relative_tokenizer_and_data_paths_resolve_against_the_suite_file(tmp_path):
    folder = tmp_path / "elsewhere"
    (folder / "corpus").mkdir(parents=True)
    (folder / "corpus" / "train.txt").write_text("a b " * 20000)
    (folder / "corpus" / "val.txt").write_text("b a " * 5000)
    _tokenizer(folder / "tok" / "tokenizer.json")
    suite = write_suite(folder / "paths.yaml", SUITE)
    result = run_cli(
        "run", str(suite), "--store", str(tmp_path / "s.sqlite"), "--no-report", env={"ATTNBENCH_PLUGINS": "softmax"}
    )  # run_cli works from the repository root
    assert result.returncode == 0, result.stderr
    assert "could not load pretrained tokenizer" not in result.stderr


def test_a_hub_tokenizer_name_is_kept_and_the_default_corpus_is_builtin(tmp_path):
    spec = DataSpec(tokenizer="pretrained", tokenizer_name="gpt2").resolved(tmp_path)
    assert spec.tokenizer_name == "gpt2"  # nothing named gpt2 beside the suite: a hub name
    assert DataSpec().source == "builtin"
