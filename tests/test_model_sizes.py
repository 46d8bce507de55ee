"""Every model size a suite uses is checked before any cell runs (issue 61, item 2): a variant's
declared constraints at `validate --no-build` (without torch), each size built once by `validate`
and at the start of `run`; a refusal names the variant, the size and the reason."""

from __future__ import annotations

import io
import json

import pytest

from attnbench.errors import ModelSizeError
from attnbench.plan.suite import load_suite
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.run.runner import run_suite
from attnbench.store.database import Store
from tests import sized_variants
from tests.helpers import fake_distribution, python, write_suite

TRAIN = "train: {batch_size: 2, seq_len: 16, budget: {steps: 2}, eval_interval: 2, eval_tokens: 64, checkpoint: false}"

# halves and declared refuse head_dim 3 (d_model 48, 16 heads) and 5 (d_model 40, 8 heads)
REFUSED = f"""
    version: 1
    name: sizes-refused
    defaults:
      data: {{source: builtin, max_bytes: 50000}}
      {TRAIN}
    experiments:
      - name: e
        kind: train
        variants: [plain, halves, declared]
        models: [{{d_model: 48, n_layer: 1, n_head: 16}}, {{d_model: 40, n_layer: 1, n_head: 8}}]
      - name: mixed
        kind: train
        variants: [plain]
        models: [{{d_model: 48, n_layer: 2, n_head: 16, layers: [declared, plain]}}]
"""

# every size builds: train at head_dim 16, speed at d_model 48 with 4 heads (head_dim 12)
BUILDS = f"""
    version: 1
    name: sizes-build
    experiments:
      - name: e
        kind: train
        variants: [plain, halves, declared]
        data: {{source: builtin, max_bytes: 50000}}
        models: [{{d_model: 32, n_layer: 2, n_head: 2}}]
        seeds: [0, 1]
        {TRAIN}
      - name: s
        kind: speed
        variants: [halves]
        models: [{{d_model: 48, n_layer: 1, n_head: 4}}]
        speed: {{lengths: [16], modes: [forward]}}
"""


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """Both suites through `attnbench validate --no-build`, then `validate` (which builds), in one process with
    only the sized variants installed: exit codes, output, whether torch was loaded after each,
    and the mixers built and forwards run (``sized_variants.CALLS``)."""
    tmp = tmp_path_factory.mktemp("sizes")
    refused, builds = write_suite(tmp / "refused.yaml", REFUSED), write_suite(tmp / "builds.yaml", BUILDS)
    env = {**fake_distribution(tmp, "sized-dist", "sized", module="tests.sized_variants"), "ATTNBENCH_PLUGINS": "sized"}
    proc = python(
        f"""
        import contextlib, io, json, sys
        from attnbench.cli import main

        out = {{}}
        for name, argv in (
            ("refused", ["validate", {str(refused)!r}, "--no-build"]),
            ("builds", ["validate", {str(builds)!r}, "--no-build"]),
            ("refused_built", ["validate", {str(refused)!r}]),
            ("builds_built", ["validate", {str(builds)!r}]),
        ):
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(argv)
            loaded = "torch" in sys.modules
            out[name] = {{"code": code, "out": stdout.getvalue(), "err": stderr.getvalue(), "torch": loaded}}
        from tests import sized_variants
        out["calls"] = sized_variants.CALLS
        print(json.dumps(out))
        """,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_declared_constraint_refuses_a_size_at_validate_without_torch(validated):
    refused = validated["refused"]
    assert refused["code"] == 2 and not refused["torch"]
    err = refused["err"]
    assert "variant 'declared' at d_model 48, n_layer 1, n_head 16 (head_dim 3)" in err
    assert "variant 'declared' at d_model 40, n_layer 1, n_head 8 (head_dim 5)" in err
    assert f"breaks its declared constraint head_dim % 2 == 0 ({sized_variants.WHY_EVEN})" in err
    # a hybrid carries its parts' constraints, named by the layers they bind
    assert "variant 'declared + plain' at d_model 48, n_layer 2, n_head 16" in err
    assert "declared layers: head_dim % 2 == 0" in err
    assert "used by experiment(s) 'e'" in err and "used by experiment(s) 'mixed'" in err
    assert "3 model size(s) refused" in err  # every refusal, not the first; halves declares nothing
    assert "'halves'" not in err


def test_validate_states_the_declared_constraints(validated):
    builds = validated["builds"]
    assert builds["code"] == 0 and not builds["torch"], builds["err"]
    lines = builds["out"].splitlines()
    assert lines[0].endswith("ok (2 experiments, 7 cells)")
    assert lines[1] == "model sizes: 4 distinct (declared constraints hold; not built (--no-build))"
    assert lines[2:] == [f"  constraint declared: head_dim % 2 == 0 ({sized_variants.WHY_EVEN})"]


def test_validate_reports_every_size_a_builder_refuses(validated):
    built = validated["refused_built"]
    assert built["code"] == 2
    err = built["err"]
    for d_model, n_head, head_dim in ((48, 16, 3), (40, 8, 5)):
        size = f"d_model {d_model}, n_layer 1, n_head {n_head} (head_dim {head_dim}), context 16, vocab_size 256"
        assert f"variant 'halves' at {size}" in err
        assert f"its builder refused: ValueError: head_dim {head_dim} is odd; {sized_variants.WHY_EVEN}" in err
    assert "5 model size(s) refused" in err  # halves twice, declared twice, the hybrid once


def test_a_suite_whose_sizes_all_build_passes_and_nothing_is_trained(validated):
    built = validated["builds_built"]
    assert built["code"] == 0, built["err"]
    assert "model sizes: 4 distinct (each built once)" in built["out"]
    calls = validated["calls"]
    # the refused suite's sizes that build, then this suite's: each (variant, size, layer) once
    ours = sorted(tuple(c) for c in calls["built"] if c[1:3] in ([32, 2], [48, 4]))
    assert ours == [
        ("declared", 32, 2, 0),
        ("declared", 32, 2, 1),
        ("halves", 32, 2, 0),
        ("halves", 32, 2, 1),
        ("halves", 48, 4, 0),  # the speed experiment's size
        ("plain", 32, 2, 0),
        ("plain", 32, 2, 1),
    ]
    assert calls["forward"] == 0


def test_run_refuses_before_any_cell_or_gate(tmp_path):
    registry = load_registry(get_plugin_manager([("sized", sized_variants)], entry_points=False))
    suite = load_suite(write_suite(tmp_path / "refused.yaml", REFUSED))
    forwards = sized_variants.CALLS["forward"]
    with Store(tmp_path / "store.sqlite") as store:
        with pytest.raises(ModelSizeError) as refused:
            run_suite(suite, store, registry, device="cpu", out=io.StringIO())
        assert store.runs() == [] and store.checks() == []
    message = str(refused.value)
    assert "variant 'halves' at d_model 48, n_layer 1, n_head 16 (head_dim 3)" in message
    assert "its builder refused: ValueError: head_dim 3 is odd" in message
    assert "head_dim 5 is odd" in message and "breaks its declared constraint head_dim % 2 == 0" in message
    assert sized_variants.CALLS["forward"] == forwards  # no gate check, no cell
