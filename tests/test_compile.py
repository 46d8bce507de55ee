"""`compile: true` (suite) / `--compile` (CLI): the model trains through torch.compile, the
result says so, the cell gets a key of its own, and the numbers match eager training."""

from __future__ import annotations

import pytest

from attnbench.store.database import Store
from tests.helpers import run_cli, tiny_train_suite, write_suite

SUITE = tiny_train_suite("compile-check")


@pytest.mark.slow
def test_compiled_training_is_recorded_keyed_apart_and_matches_eager(tmp_path):
    suite, store = write_suite(tmp_path / "s.yaml", SUITE), tmp_path / "s.sqlite"
    eager = run_cli("run", str(suite), "--store", str(store), "--no-report")
    assert eager.returncode == 0, eager.stderr
    compiled = run_cli("run", str(suite), "--store", str(store), "--no-report", "--compile")
    assert compiled.returncode == 0, compiled.stderr
    assert "1 run, 0 already stored" in compiled.stdout  # not the eager cell's key
    with Store(store) as s:
        runs = {r["summary"]["compile"]: r for r in s.runs(suite="compile-check")}
    assert set(runs) == {False, True}
    assert runs[True]["summary"]["compile_backend"] == "inductor"
    assert runs[True]["config"]["train"]["compile"] is True
    assert runs[True]["summary"]["val_loss"] == pytest.approx(runs[False]["summary"]["val_loss"], rel=1e-4)
    eager_summary = runs[False]["summary"]  # MFU against the measured fp32 matmul peak of this CPU
    assert eager_summary["peak_flops_per_s"] > 0 and eager_summary["peak_method"].startswith("best of")
    assert 0 < eager_summary["mfu"] < 1


def test_speed_points_record_compile_and_decode_stays_eager(tmp_path):
    from attnbench import ModelConfig, load_registry
    from attnbench.experiments.speed.points import PointSpec, build_point

    variant = load_registry().get("softmax")
    config = ModelConfig(vocab_size=32, d_model=16, n_layer=1, n_head=2, context=32)
    spec = PointSpec(
        "softmax", "decode", 8, config, 1, "cpu", "fp32", 0, 2, "backbone", compile=True, builder=variant.build_mixer
    )
    point = build_point(spec)
    point.run()
    assert point.info["compile"] == "not applied: decode steps run eagerly"


def test_the_backbone_compiles_in_one_graph_with_ignored_targets():
    """The H200 check's GPT-2 log showed a graph break at the scored-positions selection (a
    data-dependent `keep.all()`): compiled, the head runs on every position and the loss,
    which ignores the same positions, is the eager one."""
    import torch

    from attnbench import ModelConfig
    from attnbench.nn.backbone import Backbone
    from attnbench.plugins.attention import softmax_model

    torch.manual_seed(0)
    model = Backbone(
        ModelConfig(vocab_size=64, d_model=32, n_layer=2, n_head=2, context=64), softmax_model.SoftmaxAttention
    )
    idx = torch.randint(0, 64, (2, 16))  # (B, T)
    targets = idx.roll(-1, dims=1).masked_fill(torch.arange(16) < 5, -100)  # (B, T) the first 5 positions ignored
    explained = torch._dynamo.explain(model)(idx, targets)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(model, backend="eager")(idx, targets)
    torch.testing.assert_close(compiled.loss, model(idx, targets).loss)
