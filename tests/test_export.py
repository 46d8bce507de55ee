"""Hugging Face export: `attnbench export` folders that transformers' Auto classes and
`lm_eval --model hf` load, scoring and generating exactly as attnbench does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")
from lm_eval.api.instance import Instance  # noqa: E402
from transformers.models.auto.modeling_auto import AutoModelForCausalLM  # noqa: E402
from transformers.models.auto.tokenization_auto import AutoTokenizer  # noqa: E402

from attnbench import ModelConfig  # noqa: E402
from attnbench.data.builtin import builtin_text  # noqa: E402
from attnbench.errors import ModelArgsError  # noqa: E402
from attnbench.experiments.lm_eval.model import AttnbenchLM  # noqa: E402
from attnbench.nn.checkpoint import build_model, load_checkpoint, save_checkpoint  # noqa: E402
from attnbench.nn.generate import generate  # noqa: E402
from attnbench.store.database import Store  # noqa: E402
from tests.helpers import REPO, run_cli, write_suite  # noqa: E402

TASKS = REPO / "suites" / "lm_eval_tasks"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _checkpoint(
    registry, tmp_path, variant: str, kind: str = "backbone", tokenizer: str | None = None, vocab: int = 256
):
    """A small model with non-trivial weights (init plus noise), saved as a train cell does."""
    options = {"chunk_size": 8} if variant in ("linear", "heinsen") else None
    config = ModelConfig(vocab_size=vocab, d_model=32, n_layer=2, n_head=2, context=64).to_dict()
    config["options"] = options
    torch.manual_seed(0)
    model = build_model(registry.get(variant), kind, config, "test")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    payload = {
        "model": model.state_dict(),
        "config": config,
        "variant": variant,
        "model_kind": kind,
        "cell_key": f"test-{variant}",
        "step": 3,
        **({"tokenizer": tokenizer} if tokenizer else {}),
    }
    path = tmp_path / f"{variant}-{kind}.pt"
    save_checkpoint(path, payload)
    return path


@pytest.mark.parametrize("variant,kind", [("softmax", "backbone"), ("linear", "backbone"), ("heinsen", "own")])
def test_exported_model_matches_attnbench_logits_and_greedy_generation(registry, tmp_path, variant, kind):
    ckpt = _checkpoint(registry, tmp_path, variant, kind)
    out = tmp_path / "exported"
    result = run_cli("export", str(ckpt), str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "attnbench" and config["variant"] == variant and config["model_kind"] == kind
    assert config["attnbench_config"]["options"] == (None if variant == "softmax" else {"chunk_size": 8})
    assert config["provenance"]["variant"]["sources"] and config["provenance"]["versions"]["attnbench"]

    ours, _ = load_checkpoint(ckpt, registry)
    hf = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(str(out))
    text = "To be, or not to be:\nthat is the question. ¿Qué? Ċ"  # Ċ: the newline's byte-level symbol
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))  # the byte-level tokenizer is attnbench's bytes
    assert tok.decode(ids) == text
    x = torch.tensor([ids])  # (1, T)
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, ours(x).logits, atol=1e-5, rtol=0)
    prompt = x[:, :20]
    expected = generate(ours, prompt, 16)  # (1, 36) attnbench's greedy decoding
    steps, step = [], hf.model.step
    hf.model.step = lambda idx, state: steps.append(idx.size(1)) or step(idx, state)
    # transformers annotates from_pretrained(...).eval() as a base class without generate()
    got = hf.generate(prompt, max_new_tokens=16, do_sample=False)  # pyright: ignore[reportAttributeAccessIssue]
    assert torch.equal(got, expected)
    assert steps == [20] + [1] * 15  # the prompt in one step, then one token per step: the variant's state


def test_export_refuses_overwrites_and_names_a_missing_plugin(registry, tmp_path):
    ckpt = _checkpoint(registry, tmp_path, "softmax")
    out = tmp_path / "exported"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    refused = run_cli("export", str(ckpt), str(out))
    assert refused.returncode == 2 and "not empty" in refused.stderr and "--overwrite" in refused.stderr
    assert (out / "keep.txt").read_text() == "mine"  # nothing already there is lost
    assert run_cli("export", str(ckpt), str(out), "--overwrite").returncode == 0
    untokenized = _checkpoint(registry, tmp_path, "linear", vocab=300)  # a BPE model from before checkpoints kept it
    refused = run_cli("export", str(untokenized), str(tmp_path / "bpe"))
    assert refused.returncode == 2 and "keeps no tokenizer" in refused.stderr and not (tmp_path / "bpe").exists()
    config = json.loads((out / "config.json").read_text())
    config.update(variant="no-such-variant", plugin_distribution="attnbench-no-such-plugin")
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ImportError, match="attnbench-no-such-plugin.*pip install attnbench-no-such-plugin"):
        AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True)


def test_lm_eval_model_args_batch_size_unknown_names_and_help(registry, tmp_path):
    ckpt = _checkpoint(registry, tmp_path, "softmax")
    lm = AttnbenchLM.create_from_arg_string(
        f"checkpoint={ckpt},batch_size=4,device=cpu", {"batch_size": 8, "max_batch_size": None, "device": "cpu"}
    )
    assert lm.batch_size == 4  # model_args win over lm-eval's --batch_size, no repeated keyword
    assert AttnbenchLM.create_from_arg_string(f"checkpoint={ckpt}", {"batch_size": 8}).batch_size == 8
    with pytest.raises(ModelArgsError, match=r"'batchsize' \(did you mean 'batch_size'\?\).*accepted: checkpoint"):
        AttnbenchLM.create_from_arg_string(f"checkpoint={ckpt},batchsize=4")
    helped = run_cli("lm-eval", "--help")
    assert helped.returncode == 0, helped.stderr[-2000:]
    ours, theirs = helped.stdout.find("prefix_token"), helped.stdout.find("usage:")
    assert 0 <= ours < theirs  # attnbench's model arguments come before lm-eval's help


def test_bpe_checkpoint_scores_through_attnbench_lm_eval(registry, tmp_path):
    from attnbench.data.tokenizers import train_bpe

    bpe = train_bpe(builtin_text("tinyshakespeare")[:50000], 300)
    ckpt = _checkpoint(registry, tmp_path, "softmax", tokenizer=bpe.to_json(), vocab=300)
    lm = AttnbenchLM(checkpoint=str(ckpt), device="cpu", batch_size=2)
    text = "Good morrow, sweet lord."
    ids = bpe.encode(text).tolist()
    assert lm.prefix_token == bpe.encode("\n").tolist()[0] and len(ids) < len(text.encode())
    total = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    ours, _ = load_checkpoint(ckpt, registry)
    with torch.no_grad():
        seq = torch.tensor([[lm.prefix_token, *ids]])  # (1, T + 1)
        logp = torch.log_softmax(ours(seq[:, :-1]).logits, -1)[0]  # (T, V)
        direct = sum(logp[i, t].item() for i, t in enumerate(ids))
    assert total == pytest.approx(direct, abs=1e-4)


SUITE = """
    version: 1
    name: hf-export-{tokenizer}
    defaults:
      model: {{d_model: 32, n_layer: 1, n_head: 2}}
      variants: [softmax]
    experiments:
      - name: tiny
        kind: train
        data: {{source: text, path: {train}, val_path: heldout_harness.txt, tokenizer: {tokenizer},
               bpe_vocab_size: 320}}
        train: {{budget: {{steps: 15}}, batch_size: 8, seq_len: 64, lr: 1.0e-2, warmup_steps: 2,
                eval_interval: 1000, eval_tokens: 2048}}
      - name: native
        kind: lm_eval
        lm_eval: {{from_experiment: tiny, tasks: [attnbench_heldout_text], include_path: {tasks},
                  paths: {{text_path: heldout_lm.txt}}, batch_size: 8, bootstrap_iters: 0}}
      - name: viahf
        kind: lm_eval
        lm_eval: {{from_experiment: tiny, tasks: [attnbench_heldout_text], include_path: {tasks},
                  paths: {{text_path: heldout_lm.txt}}, batch_size: 8, bootstrap_iters: 0, model: hf}}
"""


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe"])
def test_lm_eval_hf_cli_on_export_gives_attnbench_bits_per_byte(tmp_path, tokenizer):
    text = builtin_text("tinyshakespeare")
    body = text[-20000:].encode("ascii", "ignore")[: 16 * 64].decode("ascii")
    (tmp_path / "heldout_lm.txt").write_text(body)
    (tmp_path / "heldout_harness.txt").write_text("\n" + body)
    (tmp_path / "train.txt").write_text(text[:200000])
    suite = write_suite(
        tmp_path / "suite.yaml", SUITE.format(tokenizer=tokenizer, train=tmp_path / "train.txt", tasks=TASKS)
    )
    store_path = tmp_path / "store.sqlite"
    ran = run_cli("run", str(suite), "--store", str(store_path), env=OFFLINE)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    with Store(store_path) as store:
        runs = {r["experiment"]: r for r in store.runs()}
        bpb = {
            name: next(r["value"] for r in store.results(runs[name]["id"]) if r["name"] == "bits_per_byte")
            for name in ("native", "viahf")
        }
    assert runs["native"]["summary"]["model"] == "attnbench" and runs["viahf"]["summary"]["model"] == "hf"
    export = runs["viahf"]["summary"]["hf_export"]
    assert (
        json.loads(
            (tmp_path / "store.sqlite").parent.joinpath("exports", runs["tiny"]["cell_key"], "config.json").read_text()
        )["variant"]
        == "softmax"
    )
    assert 1.0 < bpb["native"] < 9.0 and bpb["viahf"] == pytest.approx(bpb["native"], abs=1e-4)

    out_dir = tmp_path / "lm_eval_out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={export},trust_remote_code=True",
            "--tasks",
            "attnbench_heldout_text",
            "--include_path",
            str(TASKS),
            "--device",
            "cpu",
            "--batch_size",
            "8",
            "--metadata",
            json.dumps({"text_path": str(tmp_path / "heldout_lm.txt")}),
            "--output_path",
            str(out_dir),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **OFFLINE},
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads(next(out_dir.rglob("results_*.json")).read_text())
    cli_bpb = saved["results"]["attnbench_heldout_text"]["bits_per_byte,none"]
    assert cli_bpb == pytest.approx(bpb["native"], abs=1e-4)
