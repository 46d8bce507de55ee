"""The README's main install, no extras: every shipped suite's experiment kinds and task plugins
run one tiny cell each, token-id checkpoints included, and a suite that needs an extra is refused
before anything trains, naming the package and the pip line.

The test venv holds every extra (tests need them), so the main install is rebuilt beside it: a
fresh venv whose site-packages links exactly the files of the distributions that
``pip install -e .`` (no extras) brings, the same pinned versions as ``constraints.txt``, read
from the installed metadata (nothing is downloaded)."""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import write_suite

SUITES = Path(__file__).resolve().parents[1] / "suites"
EXTRAS_ONLY = ("tokenizers", "peft", "transformers", "ray", "fla", "attnbench_toy")  # none is in the main set


def _main_closure(site: Path) -> list[md.Distribution]:
    """attnbench and every distribution its requirements (no extras) pull in, recursively."""
    installed = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions(path=[str(site)])}
    todo, seen = [("attnbench", frozenset[str]())], set()
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        assert key in installed, f"{name} is required by the main install but not installed in {site}"
        for text in installed[key].requires or []:
            req = Requirement(text)
            wanted = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *extras})
            if wanted:
                todo.append((req.name, frozenset(req.extras)))
    return [installed[key] for key in sorted({key for key, _ in seen})]


def _main_install_venv(root: Path) -> Path:
    """A fresh venv holding the main install's distributions (links to this venv's files)."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(root)], check=True)  # type: ignore[attr-defined]
    site = Path(sysconfig.get_paths()["purelib"])
    target = Path(
        subprocess.check_output(
            [str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    for dist in _main_closure(site):
        for file in dist.files or []:
            src = Path(os.path.normpath(site / file))
            if not src.is_file() or site not in src.parents:  # scripts outside site-packages, editable sources
                continue
            dst = target / src.relative_to(site)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                dst.symlink_to(src)
    return root / "bin" / "python"


def _shipped() -> tuple[set[str], set[str]]:
    """Experiment kinds and task plugins the shipped CPU and GPU suites use."""
    kinds, tasks = set(), set()
    for path in SUITES.glob("*.yaml"):
        for exp in yaml.safe_load(path.read_text())["experiments"]:
            kinds.add(exp["kind"])
            task = (exp.get("data") or {}).get("task")
            if task:
                tasks.add(task)
    return kinds, tasks


TINY_TRAIN = {"budget": {"steps": 3}, "batch_size": 4, "eval_interval": 3, "eval_tokens": 256, "warmup_steps": 1}
TASK_OPTIONS = {  # small settings of each task (its defaults where they are small already)
    "mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4},
    "mad_recall": {"vocab_size": 16, "seq_len": 32},
    "mad_noisy_recall": {"vocab_size": 32, "seq_len": 32, "noise_vocab_size": 16, "frac_noise": 0.2},
    "mad_fuzzy_recall": {"vocab_size": 16, "seq_len": 32, "key_len": 2, "value_len": 2},
    "mad_compression": {"vocab_size": 16, "seq_len": 32},
    "mad_memorization": {"vocab_size": 64, "seq_len": 32},
    "selective_copy": {"vocab_size": 16, "seq_len": 32, "num_tokens": 4},
    "text_recall": {"n_pairs": 4, "n_queries": 4},
    "niah_passkey": {"seq_len": 128},
    "niah_number": {"seq_len": 128},
    "niah_uuid": {"seq_len": 128},
}


def _tiny_suite(tasks: set[str]) -> dict:
    data = {"train_examples": 32, "val_examples": 8, "test_examples": 8}
    experiments: list[dict] = [
        {
            "name": "text",
            "kind": "train",
            "data": {"source": "builtin"},
            "train": {**TINY_TRAIN, "seq_len": 48},
        },  # lm-eval recall documents need 36,
        {
            "name": "own",
            "kind": "train",
            "variants": ["additive"],
            "data": {"source": "builtin"},
            "train": {**TINY_TRAIN, "seq_len": 32, "model_kind": "own"},
        },
    ]
    for task in sorted(tasks):
        seq = TASK_OPTIONS[task].get("seq_len", 32 if task != "text_recall" else 25)
        experiments.append(
            {
                "name": f"task-{task}",
                "kind": "train",
                "data": {"source": "task", "task": task, "task_options": TASK_OPTIONS[task], **data},
                "train": {**TINY_TRAIN, "seq_len": seq},  # checkpoint: true (the default): token ids saved
            }
        )
    recall = {"source": "task", "task": "text_recall", "task_options": TASK_OPTIONS["text_recall"], **data}
    experiments += [
        {
            "name": "full",
            "kind": "finetune",
            "data": recall,
            "finetune": {"from_experiment": "text", "method": "full", **TINY_TRAIN, "seq_len": 25},
        },
        {
            "name": "scaling",
            "kind": "scaling",
            "data": {"source": "builtin"},
            "models": [{"d_model": d, "n_layer": 1, "n_head": 2} for d in (8, 12, 16, 24)],
            "scaling": {
                "tokens_per_param": 0.05,
                "batch_size": 4,
                "seq_len": 32,
                "eval_interval": 100,
                "eval_tokens": 256,
                "checkpoint": False,
            },
        },
        {
            "name": "speed",
            "kind": "speed",
            "speed": {
                "lengths": [32],
                "modes": ["train_step"],
                "min_rounds": 1,
                "max_time": 0.01,
                "warmup": 0,
                "max_remeasure": 0,
                "time_limit_s": 30,
            },
        },
        {
            "name": "downstream",
            "kind": "lm_eval",
            "lm_eval": {
                "from_experiment": "text",
                "tasks": ["attnbench_recall"],
                "include_path": str(SUITES / "lm_eval_tasks"),
                "metadata": {"n_docs": 4},
                "batch_size": 4,
                "offline": True,
            },
        },
    ]
    return {
        "version": 1,
        "name": "main-install",
        "defaults": {"variants": ["softmax"], "seeds": [0], "model": {"d_model": 16, "n_layer": 1, "n_head": 2}},
        "experiments": experiments,
    }


@pytest.fixture(scope="module")
def main_python(tmp_path_factory) -> Path:
    return _main_install_venv(tmp_path_factory.mktemp("main-venv") / "venv")


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(ATTNBENCH_CACHE=str(cwd / "cache"), HOME=str(cwd))
    return subprocess.run(
        [str(python), "-m", "attnbench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_main_install_lacks_the_extras(main_python):
    probe = f"import importlib.util as u; print([m for m in {EXTRAS_ONLY!r} if u.find_spec(m)])"
    out = subprocess.run([str(main_python), "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"the rebuilt main install has extras: {out}"


def test_every_shipped_kind_and_task_runs_a_tiny_cell_on_the_main_install(main_python, tmp_path):
    kinds, tasks = _shipped()
    suite = _tiny_suite(tasks)
    assert kinds <= {e["kind"] for e in suite["experiments"]}, f"a shipped kind is not covered: {kinds}"
    missing = tasks - set(TASK_OPTIONS)
    assert not missing, f"shipped tasks with no tiny setting here: {missing}"
    path = write_suite(tmp_path / "suite.yaml", yaml.safe_dump(suite, sort_keys=False))
    store = tmp_path / "store.sqlite"
    done = _run(main_python, "run", str(path), "--store", str(store), "--jobs", "1", "--no-report", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    import sqlite3

    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT experiment, status, error FROM runs").fetchall()
        metrics = dict(
            db.execute(
                "SELECT r.experiment, COUNT(*) FROM runs r JOIN results m ON m.run_id = r.id GROUP BY r.experiment"
            ).fetchall()
        )
        (kept,) = db.execute("SELECT json_extract(summary, '$.checkpoint') FROM runs WHERE experiment = 'task-mqar'")
    assert {r[0] for r in rows} == {e["name"] for e in suite["experiments"]}
    assert all(status == "done" and error is None for _, status, error in rows), rows
    for task in tasks:
        assert metrics.get(f"task-{task}", 0) > 0, f"{task}: no results stored"
    assert kept[0] and Path(kept[0]).is_file(), "the token-id task kept no checkpoint"


def test_a_suite_needing_an_extra_is_refused_before_anything_runs(main_python, tmp_path):
    suite = {
        "version": 1,
        "name": "needs-lora",
        "defaults": {"variants": ["softmax"], "seeds": [0]},
        "experiments": [
            {"name": "text", "kind": "train", "data": {"source": "builtin"}, "train": {**TINY_TRAIN, "seq_len": 32}},
            {
                "name": "lora",
                "kind": "finetune",
                "data": {"source": "task", "task": "text_recall"},
                "finetune": {"from_experiment": "text", "method": "lora", "ranks": [1], **TINY_TRAIN, "seq_len": 25},
            },
        ],
    }
    path = write_suite(tmp_path / "suite.yaml", yaml.safe_dump(suite, sort_keys=False))
    store = tmp_path / "store.sqlite"
    refused = _run(main_python, "run", str(path), "--store", str(store), "--no-report", cwd=tmp_path)
    assert refused.returncode != 0
    assert "experiment 'lora': finetune method: lora needs the 'peft' package" in refused.stderr, refused.stderr
    assert "pip install 'attnbench[lora]'" in refused.stderr
    assert "checking softmax" not in refused.stderr + refused.stdout  # not even the trust gate ran


def test_a_token_id_checkpoint_tokenizer_reads_the_same_in_hugging_face_tokenizers():
    tokenizers = pytest.importorskip("tokenizers")
    from attnbench.data.tokenizers import TokenIdsTokenizer

    text = TokenIdsTokenizer(8).to_json()  # written without the tokenizers package
    tok = tokenizers.Tokenizer.from_str(text)
    assert tok.encode("3 5 7").ids == [3, 5, 7]
    assert tok.get_vocab_size() == 8


def test_a_failure_after_training_keeps_the_cells_metrics_with_the_error_beside_them(tmp_path, capsys):
    from attnbench.cli import main
    from attnbench.store.database import Store

    (tmp_path / "checkpoints").write_text("a file where the checkpoint folder goes")
    train = {**TINY_TRAIN, "seq_len": 32, "checkpoint": True, "checkpoint_interval": 0}
    suite = {"version": 1, "name": "after", "defaults": {"variants": ["softmax"], "seeds": [0]}, "experiments": [
        {"name": "text", "kind": "train", "models": [{"d_model": 16, "n_layer": 1, "n_head": 2}],
         "data": {"source": "builtin"}, "train": train}]}  # fmt: skip
    path = write_suite(tmp_path / "suite.yaml", yaml.safe_dump(suite, sort_keys=False))
    code = main(["run", str(path), "--store", str(tmp_path / "s.sqlite"), "--no-report"])
    err = capsys.readouterr().err
    assert code == 1
    assert "done, results stored, but saving the final checkpoint failed" in err
    with Store(tmp_path / "s.sqlite") as store:
        (run,) = store.runs()
        assert run["status"] == "done" and "saving the final checkpoint failed" in (run["error"] or "")
        assert store.metrics(run["id"]) and store.results(run["id"])
