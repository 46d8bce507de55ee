"""Held-out text for lm-eval's attnbench_heldout_text task, one flag away from an export:
`attnbench export ... --heldout-text FILE [--split test|val]` writes the split of the corpus the
run trained on (the shipped tinyshakespeare's test split for the quick suite's text), cut exactly
as its training cut it."""

from __future__ import annotations

import pytest

from attnbench import ModelConfig
from attnbench.data.builtin import builtin_text
from attnbench.data.corpus import split_text
from attnbench.data.spec import DataSpec
from attnbench.errors import ExportError
from attnbench.export.heldout import write_heldout_text
from attnbench.nn.checkpoint import build_model, save_checkpoint
from attnbench.store.database import Store
from tests.helpers import run_cli
from tests.report_store import record

QUICK_TEXT = {"source": "builtin", "val_fraction": 0.05, "test_fraction": 0.05}  # suites/quick.yaml's text data


def test_the_test_split_of_the_shipped_corpus_is_its_tail_never_trained_on(tmp_path):
    written = write_heldout_text(QUICK_TEXT, "test", tmp_path / "heldout.txt")
    text = written.path.read_text(encoding="utf-8")
    full = builtin_text("tinyshakespeare")
    train, val, _ = split_text(DataSpec.model_validate(QUICK_TEXT))
    assert full.endswith(text) and full == train + val + text  # train | val | test, in that order
    assert len(text) == pytest.approx(0.05 * len(full), rel=0.01)
    assert written.corpus == "builtin:tinyshakespeare" and written.n_bytes == len(text.encode("utf-8"))
    val_written = write_heldout_text(QUICK_TEXT, "val", tmp_path / "val.txt")
    assert val_written.path.read_text(encoding="utf-8") == val


def test_a_corpus_without_a_test_split_or_a_task_says_what_to_give(tmp_path):
    plain = {"source": "builtin"}  # held out a validation tail only
    with pytest.raises(ExportError, match="holds out no test split.*--split val"):
        write_heldout_text(plain, "test", tmp_path / "h.txt")
    assert write_heldout_text(plain, "val", tmp_path / "h.txt").n_bytes > 0
    with pytest.raises(ExportError, match="synthetic task 'mqar'"):
        write_heldout_text({"source": "task", "task": "mqar"}, "test", tmp_path / "t.txt")


def _trained(registry, tmp_path):
    """A checkpoint kept by a train cell whose run is in a store, as `attnbench run` leaves them."""
    pytest.importorskip("transformers")
    config = ModelConfig(vocab_size=256, d_model=32, n_layer=2, n_head=2, context=64).to_dict()
    model = build_model(registry.get("softmax"), "backbone", config, "test")
    payload = {"model": model.state_dict(), "config": config, "variant": "softmax", "model_kind": "backbone"}
    ckpt = tmp_path / "cell.pt"
    save_checkpoint(ckpt, {**payload, "cell_key": "quick-text-softmax", "step": 1})
    store = tmp_path / "s.sqlite"
    with Store(store) as s:
        s.save_run(record("text-softmax", "text", "train", "softmax", 0, {}, {"data": QUICK_TEXT}, {}, suite="quick"))
    return ckpt, store


def test_export_writes_the_runs_test_split_beside_the_model(registry, tmp_path):
    ckpt, store = _trained(registry, tmp_path)
    # record() prefixes the suite: the run's cell key is "quick-text-softmax", the checkpoint's
    out, heldout = tmp_path / "exported", tmp_path / "texts" / "heldout.txt"
    result = run_cli("export", str(ckpt), str(out), "--store", str(store), "--heldout-text", str(heldout))
    assert result.returncode == 0, result.stderr[-3000:]
    _, _, test = split_text(DataSpec.model_validate(QUICK_TEXT))
    assert heldout.read_text(encoding="utf-8") == test
    assert (
        f'"text_path": "{heldout.resolve()}"' in result.stdout
        and "test split of builtin:tinyshakespeare" in result.stdout
    )
    assert (out / "model.safetensors").is_file()


def test_export_refuses_a_split_without_heldout_text_and_an_unknown_store(registry, tmp_path):
    ckpt, store = _trained(registry, tmp_path)
    alone = run_cli("export", str(ckpt), str(tmp_path / "a"), "--split", "val")
    assert alone.returncode != 0 and "--split val goes with --heldout-text" in alone.stderr
    missing = run_cli(
        "export",
        str(ckpt),
        str(tmp_path / "b"),
        "--heldout-text",
        str(tmp_path / "h.txt"),
        "--store",
        str(tmp_path / "none.sqlite"),
    )
    assert missing.returncode != 0 and "pass the --store the checkpoint was trained into" in missing.stderr
    assert not (tmp_path / "none.sqlite").exists()
