"""The optional flash-linear-attention kernel for `linear` (kernel: fla): recorded as the path
that ran, an error (never a silent fallback) where it cannot run, and equal to our kernel
where it can (CUDA with fla installed)."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from attnbench import Backbone, ModelConfig
from attnbench.experiments.speed.points import describe_path


def _model(registry, kernel: str, device: str = "cpu") -> Backbone:
    variant = registry.get("linear")
    config = ModelConfig(
        vocab_size=64, d_model=32, n_layer=1, n_head=2, context=128, options=variant.make_options({"kernel": kernel})
    )
    torch.manual_seed(0)
    return Backbone(config, variant.build_mixer).to(device)


def test_fla_on_cpu_is_an_error_naming_why(registry):
    model = _model(registry, "fla")
    assert describe_path(model)["kernel"] == "fla.ops.linear_attn.chunk_linear_attn"
    with pytest.raises(RuntimeError, match="kernel 'fla' cannot run: the fla kernels run on CUDA only"):
        model(torch.randint(0, 64, (1, 16)))


def test_default_path_is_ours_and_recorded(registry):
    path = describe_path(_model(registry, "chunked"))
    assert path == {
        "kernel": "chunked.linear_attention",
        "decode_kernel": "chunked.linear_attention",
        "chunk_size": 64,
        "feature_map": "elu",
    }


def test_unknown_kernel_is_refused(registry):
    with pytest.raises(ValueError, match=r"kernel must be one of \['chunked', 'fla'\]"):
        registry.get("linear").make_options({"kernel": "triton"})


@pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("fla") is None,
    reason="the fla kernel needs a CUDA device and flash-linear-attention installed",
)
def test_fla_equals_our_kernel_on_cuda(registry):
    ours, fla = _model(registry, "chunked", "cuda"), _model(registry, "fla", "cuda")
    fla.load_state_dict(ours.state_dict())
    x = torch.randint(0, 64, (2, 128), device="cuda")
    torch.testing.assert_close(fla(x).logits, ours(x).logits, rtol=1e-3, atol=1e-3)


def test_fla_fp32_dots_follow_torchs_fp32_matmul_precision(monkeypatch):
    """Triton rounds fp32 dot operands to tf32 unless told; torch's default ("highest") does not.
    On an H100 the tf32 default put fla's fp32 output 2.4e-4 from ours; ieee, 2.0e-7."""
    from attnbench.plugins.kernels.fla_linear import TRITON_FP32, follow_torch_fp32_precision

    monkeypatch.delenv(TRITON_FP32, raising=False)
    previous = torch.get_float32_matmul_precision()
    try:
        assert follow_torch_fp32_precision() == "ieee" == os.environ[TRITON_FP32]
        monkeypatch.delenv(TRITON_FP32)
        torch.set_float32_matmul_precision("high")  # the user allows tf32 in torch: fla may use it too
        assert follow_torch_fp32_precision() == "tf32"
        monkeypatch.setenv(TRITON_FP32, "tf32x3")  # a value the user set is kept
        assert follow_torch_fp32_precision() == "tf32x3"
    finally:
        torch.set_float32_matmul_precision(previous)
