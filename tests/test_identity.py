"""Identity covers the code that ran: editing any module a variant or a cell kind runs
changes exactly the keys that depend on it; moving code without changing it changes none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from attnbench.registry import identity
from attnbench.registry.identity import code_hash, module_closure
from tests.helpers import REPO

BUILTINS = ["additive", "future", "heinsen", "linear", "softmax", "windowed"]

# Prints every cell key (train and speed experiments, all built-ins) and every gate key.
_KEYS = """
import json, sys
import attnbench
from attnbench import load_registry
from attnbench.experiments.registry import expand_suite
from attnbench.gate.verdicts import gate_key_inputs
from attnbench.plan.suite import load_suite
from attnbench.store.provenance import content_key
assert attnbench.__file__.startswith(sys.argv[2]), attnbench.__file__  # the copy, not the checkout
registry = load_registry()
cells = expand_suite(load_suite(sys.argv[1]), registry, device="cpu", corpus_hash=lambda spec: "corpus")
out = {"cells": {f"{c.experiment}/{c.variant}": c.key for c in cells},
       "gate": {n: content_key(gate_key_inputs(registry.get(n), "cpu")) for n in NAMES}}
print(json.dumps(out))
""".replace("NAMES", repr(BUILTINS))

_SUITE = """
version: 1
name: identity
defaults:
  model: {d_model: 32, n_layer: 1, n_head: 2}
experiments:
  - name: t
    kind: train
    variants: [NAMES]
    data: {source: stdlib, max_bytes: 100000}
    train: {batch_size: 2, seq_len: 32, budget: {steps: 2}}
  - name: s
    kind: speed
    variants: [NAMES]
    speed: {T_min: 64, T_max: 128, modes: [forward]}
""".replace("NAMES", ", ".join(BUILTINS))


def _copy_tree(dest: Path) -> Path:
    """The package as installed names lay it out: attnbench/ (harness) with plugins inside."""
    pkg = dest / "attnbench"
    shutil.copytree(REPO / "harness", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "plugins", pkg / "plugins", ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


def _keys(root: Path, suite: Path) -> dict:
    script = root / "keys.py"
    script.write_text(_KEYS)
    proc = subprocess.run(
        [sys.executable, str(script), str(suite), str(root / "attnbench")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}:{REPO}"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _changed(before: dict, after: dict) -> set[str]:
    out = {k for k in before["cells"] if before["cells"][k] != after["cells"][k]}
    return out | {f"gate/{k}" for k in before["gate"] if before["gate"][k] != after["gate"][k]}


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line)


def test_keys_follow_exactly_the_code_that_changed(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(textwrap.dedent(_SUITE))
    pkg = _copy_tree(tmp_path / "copy")
    base = _keys(tmp_path / "copy", suite)

    # A shared kernel (attnbench.kernels) only linear and heinsen use: their train and speed cells and their
    # gate identities change, nothing else does.
    _append(pkg / "kernels" / "chunked.py", "\n_EDITED = 1  # a shared kernel edit\n")
    after = _keys(tmp_path / "copy", suite)
    assert _changed(base, after) == {"t/linear", "t/heinsen", "s/linear", "s/heinsen", "gate/linear", "gate/heinsen"}

    # softmax's own module: future builds on it, so both change.
    base = after
    _append(pkg / "plugins" / "attention" / "softmax.py", "\n_EDITED = 1\n")
    after = _keys(tmp_path / "copy", suite)
    assert _changed(base, after) == {"t/softmax", "t/future", "s/softmax", "s/future", "gate/softmax", "gate/future"}

    # A line of the speed kind's package: exactly the speed cells.
    base = after
    _append(pkg / "experiments" / "speed" / "points.py", "\n_EDITED = 1\n")
    after = _keys(tmp_path / "copy", suite)
    assert _changed(base, after) == {f"s/{v}" for v in BUILTINS}

    # The training loop: exactly the train cells (the gate does not run it).
    base = after
    _append(pkg / "experiments" / "train" / "loop.py", "\n_EDITED = 1\n")
    after = _keys(tmp_path / "copy", suite)
    assert _changed(base, after) == {f"t/{v}" for v in BUILTINS}


def test_a_moved_checkout_keeps_every_key(tmp_path):
    """Paths never enter an identity: the same code elsewhere gives the same keys."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(textwrap.dedent(_SUITE))
    _copy_tree(tmp_path / "one")
    _copy_tree(tmp_path / "elsewhere" / "two")
    assert _keys(tmp_path / "one", suite) == _keys(tmp_path / "elsewhere" / "two", suite)


def test_moving_an_unchanged_file_between_packages_keeps_the_code_hash(tmp_path, monkeypatch):
    root = tmp_path / "src"
    for sub in ("mykind", "mykind/a", "mykind/b"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "mykind" / "a" / "fit.py").write_text("def fit(x):\n    return x\n")
    (root / "mykind" / "b" / "cell.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(root))
    before = code_hash("mykind")
    (root / "mykind" / "a" / "fit.py").rename(root / "mykind" / "b" / "fit.py")
    identity.package_files.cache_clear()  # the file list is cached per process
    assert code_hash("mykind") == before
    (root / "mykind" / "b" / "fit.py").write_text("def fit(x):\n    return x + 0\n")
    assert code_hash("mykind") != before


def test_module_closure_follows_imports_within_the_package_only():
    found = module_closure(["attnbench.plugins.attention.heinsen_model"], "attnbench.plugins")
    assert set(found) == {
        "attnbench.plugins",
        "attnbench.plugins.attention",
        "attnbench.plugins.attention.heinsen",
        "attnbench.plugins.attention.heinsen_model",
    }


def test_a_variant_is_identified_by_its_registration_model_and_shared_kernels():
    """The registration names its model by a "module:object" string, which no import statement
    reaches: the identity still covers the model, the plugins' shared kernels and attnbench's."""
    from attnbench import load_registry

    registry = load_registry()
    names = {n: {"/".join(Path(f).parts[-2:]) for f in registry.get(n).source_files} for n in ("linear", "mamba2")}
    assert {"attention/linear.py", "attention/linear_model.py", "kernels/fla_linear.py"} <= names["linear"]
    assert "kernels/chunked.py" in names["linear"]  # attnbench.kernels, taken from attnbench.__all__
    assert {"recurrent/mamba2.py", "recurrent/mamba2_model.py", "kernels/short_conv.py"} <= names["mamba2"]
    assert not any(n.startswith(("contract/", "registry/")) for n in names["linear"] | names["mamba2"])


def test_a_plugin_using_the_shared_kernels_is_identified_by_them():
    """The shared chunked scans live outside the plugins' package; a plugin that takes them
    from attnbench.__all__ still has them in its identity (an edit there re-runs its cells)."""
    import attnbench.plugins.attention.heinsen as heinsen
    import attnbench.plugins.attention.softmax as softmax
    from attnbench import load_registry
    from attnbench.registry.identity import plugin_source_files

    registry = load_registry()
    assert any(f.endswith("kernels/chunked.py") for f in plugin_source_files(registry.get("heinsen"), heinsen))
    assert not any("kernels/chunked.py" in f for f in plugin_source_files(registry.get("softmax"), softmax))
