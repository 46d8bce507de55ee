"""The causal depthwise convolution before DeltaNet's, Gated DeltaNet's and Mamba2's
recurrences: its CPU path (conv2d on a channels-last view, a hand-written backward) equals
conv1d's output and gradients, and survives bf16 autocast."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbench.plugins.kernels.short_conv import causal_depthwise_conv


def _reference(xx: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.conv1d(xx.transpose(1, 2), w, b, groups=w.shape[0]).transpose(1, 2)  # (B, T, C)


@pytest.mark.parametrize(
    ("B", "T", "C", "K", "bias"),
    [
        (3, 17, 5, 4, False),
        (2, 9, 6, 4, True),
        (1, 40, 3, 2, True),
        (2, 600, 512, 4, False),  # the weight's gradient by blocks of 256 positions, the last one short
        (9, 40, 512, 3, True),  # by blocks of 6 whole sequences, the last one 3
    ],
)
def test_output_and_gradients_equal_conv1d_in_float64(B, T, C, K, bias):
    g = torch.Generator().manual_seed(0)
    xx = torch.randn(B, T + K - 1, C, dtype=torch.float64, generator=g)
    w = torch.randn(C, 1, K, dtype=torch.float64, generator=g)
    b = torch.randn(C, dtype=torch.float64, generator=g) if bias else None
    dy = torch.randn(B, T, C, dtype=torch.float64, generator=g)
    grads = []
    for fn in (causal_depthwise_conv, _reference):
        leaves = [t.clone().requires_grad_(True) for t in (xx, w) + ((b,) if b is not None else ())]
        y = fn(leaves[0], leaves[1], leaves[2] if bias else None)
        (y * dy).sum().backward()
        grads.append([y.detach(), *[t.grad for t in leaves]])
    for ours, ref in zip(*grads, strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


def test_gradcheck():
    xx = torch.randn(2, 8, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 1, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: causal_depthwise_conv(a, b), (xx, w))


def test_bf16_autocast_gives_gradients_in_the_parameters_dtype():
    xx = torch.randn(2, 19, 8, requires_grad=True)
    w = torch.randn(8, 1, 4, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = causal_depthwise_conv(xx, w)
    y.float().sum().backward()
    assert xx.grad is not None and w.grad is not None
    assert (xx.grad.dtype, w.grad.dtype) == (torch.float32, torch.float32)
    ref = _reference(xx.detach(), w.detach(), None)
    torch.testing.assert_close(y.float(), ref, rtol=0.05, atol=0.05)  # bf16's rounding
