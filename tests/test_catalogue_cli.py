"""More of the bad-input catalogue (issue 28, item 5): commands that crashed with a traceback
or said something misleading. Each case goes through the CLI (`attnbench.cli.main`) and
asserts a non-zero exit, no traceback, and a message naming the option/key/path and the fix;
the fixed commands that now work are checked for what they produce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnbench import Backbone, ModelConfig
from attnbench.nn.checkpoint import load_checkpoint, save_checkpoint
from attnbench.registry.loader import load_registry
from tests.helpers import REPO, write_suite
from tests.test_catalogue import OFFLINE, Case, _main, suite_text

TASKS = str(REPO / "suites" / "lm_eval_tasks")


def _checkpoint(tmp: Path, context: int = 32) -> Path:
    """A small byte-level softmax model, saved as a train cell saves it."""
    torch.manual_seed(0)
    model = Backbone(
        ModelConfig(d_model=16, n_layer=1, n_head=2, context=context), load_registry().get("softmax").build_mixer
    )
    path = tmp / "model.pt"
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "config": model.config.to_dict(),
            "variant": "softmax",
            "model_kind": "backbone",
            "cell_key": "test",
            "step": 0,
        },
    )
    return path


def _file(path: Path) -> Path:
    path.write_text("mine")
    return path


def _validate(*sets: str):
    return lambda tmp: ["validate", str(write_suite(tmp / "s.yaml", suite_text())), *[f"--set={s}" for s in sets]]


def _tracked_run(tmp: Path) -> list[str]:
    _file(tmp / "tracking")  # where the trackers' folders go, beside the store
    return [
        "run",
        str(write_suite(tmp / "s.yaml", suite_text())),
        "--store",
        str(tmp / "st.sqlite"),
        "--track",
        "tensorboard",
        "--no-report",
    ]


CASES = [
    # was: TypeError: ... got multiple values for keyword argument 'batch_size'
    Case(
        "lm-eval-model-args-without-checkpoint",
        lambda tmp: [
            "lm-eval",
            "--model",
            "attnbench",
            "--model_args",
            "batch_size=4",
            "--tasks",
            "attnbench_recall",
            "--include_path",
            TASKS,
            "--device",
            "cpu",
        ],
        ["needs model_args checkpoint=PATH", "store=PATH,run=ID", "--model_args checkpoint="],
    ),
    # was: ValueError: both buffer length (0) and count (-1) must not be 0
    Case(
        "inspect-empty-text",
        lambda tmp: ["inspect", str(_checkpoint(tmp)), "--text", "", "--out", str(tmp / "maps")],
        ["--text is empty", "1 to 32 bytes"],
    ),
    # was: FileExistsError: [Errno 17] File exists
    Case(
        "inspect-out-is-a-file",
        lambda tmp: ["inspect", str(_checkpoint(tmp)), "--text", "the cat", "--out", str(_file(tmp / "maps"))],
        ["--out", "maps is an existing file, not a folder", "give --out a folder path"],
    ),
    Case(
        "inspect-out-under-a-file",
        lambda tmp: ["inspect", str(_checkpoint(tmp)), "--text", "the cat", "--out", str(_file(tmp / "maps") / "sub")],
        ["maps is an existing file, so no folder can be made under it", "give --out a folder path"],
    ),
    # was: TypeError: list indices must be integers or slices, not str
    Case(
        "set-list-index-out-of-range",
        _validate("experiments.e.variants.3=linear"),
        [
            "--set 'experiments.e.variants.3=linear'",
            "experiments.e.variants is a list of 1 item(s)",
            "'3' is not an index",
            "from 0 to 0",
        ],
    ),
    Case(
        "set-list-index-not-a-number",
        _validate("experiments.e.variants.first=linear"),
        ["experiments.e.variants is a list of 1 item(s)", "'first' is not an index"],
    ),
    Case(
        "set-index-into-an-unset-list",
        _validate("experiments.e.seeds.0=3"),
        ["experiments.e.seeds is not set, so it has no item 0", "--set experiments.e.seeds=[...]"],
    ),
    Case(
        "set-list-item-reaches-the-variant-check",
        _validate("experiments.e.variants.0=softmaks"),
        ["--set experiments.e.variants.0=softmaks", "unknown variant 'softmaks'", "softmax"],
    ),
    # was: the cell trained, then failed with NotADirectoryError (traceback) and its result was lost
    Case(
        "tracking-folder-is-a-file",
        _tracked_run,
        ["tracker 'tensorboard'", "tracking is a file", "move", "--store in another folder"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_a_clear_message(tmp_path, case, capsys, monkeypatch):
    for key, value in {**OFFLINE, **(case.env or {})}.items():
        monkeypatch.setenv(key, value)
    code = _main(case.setup(tmp_path))
    out, err = capsys.readouterr()
    assert code == case.code, (code, out[-2000:], err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out
    for needle in case.names:
        assert needle in err, f"{needle!r} not in: {err[-3000:]}"


def test_a_tracker_folder_blocked_by_a_file_stops_the_run_before_anything_trains(tmp_path, capsys):
    assert _main(_tracked_run(tmp_path)) == 2
    assert "trust gate" not in capsys.readouterr().out  # not even the variant's checks ran
    assert not (tmp_path / "st.sqlite").exists()  # a refused run creates nothing
    assert (tmp_path / "tracking").read_text() == "mine"  # the file in the way is left as it was


def test_list_items_are_set_by_index(tmp_path, capsys):
    suite = write_suite(tmp_path / "s.yaml", suite_text().replace("[softmax]", "[softmax, linear]"))
    assert _main(["validate", str(suite), "--set", "experiments.e.variants.1=windowed"]) == 0
    assert _main(["validate", str(suite), "--set", "experiments.e.variants.1=softmaks"]) == 2
    assert "experiments[0].variants[1]: unknown variant 'softmaks'" in capsys.readouterr().err


def test_inspect_writes_its_pictures_once_the_folder_is_free(tmp_path, capsys):
    out = tmp_path / "maps"
    assert _main(["inspect", str(_checkpoint(tmp_path)), "--text", "the cat", "--out", str(out)]) == 0
    assert (out / "index.html").is_file() and (out / "layer0.png").is_file()


def test_lm_eval_model_args_batch_size_wins_over_the_option(tmp_path, monkeypatch):
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    code = _main(
        [
            "lm-eval",
            "--model",
            "attnbench",
            "--model_args",
            f"checkpoint={_checkpoint(tmp_path)},batch_size=3",
            "--batch_size",
            "8",
            "--tasks",
            "attnbench_recall",
            "--include_path",
            TASKS,
            "--device",
            "cpu",
            "--metadata",
            json.dumps({"n_docs": 4, "n_pairs": 2, "n_queries": 2}),
            "--output_path",
            str(out),
        ]
    )
    assert code == 0
    [results] = out.rglob("results_*.json")
    saved = json.loads(results.read_text())
    assert saved["config"]["attnbench"]["batch_size"] == 3  # the model's, not lm-eval's --batch_size 8
    assert saved["n-samples"]["attnbench_recall"]["effective"] == 4


MQAR = """
version: 1
name: mqar-export
defaults:
  model: {d_model: 16, n_layer: 1, n_head: 2}
  data: {source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 32, num_kv_pairs: 2},
         train_examples: 32, val_examples: 8}
  train: {batch_size: 4, seq_len: 32, lr: 1.0e-2, warmup_steps: 1}
experiments:
  - name: e
    kind: train
    variants: [softmax]
    train: {budget: {steps: 2}}
"""


def test_a_trained_mqar_checkpoint_exports_and_the_export_runs(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    store = tmp_path / "st.sqlite"
    assert _main(["run", str(write_suite(tmp_path / "s.yaml", MQAR)), "--store", str(store), "--no-report"]) == 0
    [ckpt] = (tmp_path / "checkpoints").glob("*.pt")
    out = tmp_path / "exported"
    assert _main(["export", str(ckpt), str(out)]) == 0, capsys.readouterr().err
    assert "token-ids tokenizer" in capsys.readouterr().out
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(str(out))
    ids = tok("5 40 7 33 5", add_special_tokens=False)["input_ids"]
    assert ids == [5, 40, 7, 33, 5] and tok.decode(ids) == "5 40 7 33 5"  # ids in, ids out
    assert tok.vocab_size == 64
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True).eval()
    ours, meta = load_checkpoint(ckpt, load_registry())
    x = torch.tensor([ids])  # (1, 5)
    with torch.no_grad():
        logits = hf(x).logits  # (1, 5, 64)
        torch.testing.assert_close(logits, ours(x).logits, atol=1e-5, rtol=0)
        generated = hf.generate(x, max_new_tokens=3, do_sample=False)  # (1, 8)
    assert generated.shape == (1, 8) and torch.equal(generated[0, 5], logits[0, -1].argmax())
    assert meta.tokenizer is not None  # the checkpoint keeps it (a fresh train, not an old checkpoint)
