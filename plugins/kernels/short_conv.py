"""The causal depthwise convolution before DeltaNet's, Gated DeltaNet's and Mamba2's recurrences:

    y[b, t, c] = bias[c] + sum_{j < K} w[c, j] xx[b, t + j, c]

xx (B, T + K - 1, C) holds the K - 1 inputs before the T new ones (zeros at the start).

On a CPU, torch's conv1d wants channels first, so the (B, T, C) activations are copied to
(B, C, T) and back, and its depthwise backward is slow (issue 42's profiles: 10-15% of a
findings-shape train step). Here the (B, T, C) tensor is read in place as a channels-last
(B, C, 1, T) image for conv2d, whose depthwise kernel is fast and adds the bias in the same
pass, and the backward is plain steps: the input's gradient is the same convolution of the
output gradient (zero-padded by conv2d itself) with the flipped kernel, the weight's is K dot
products, the bias's a sum. Forward + backward with SiLU, one thread
(bench_short_conv.py at e31d51d, 2026-11-27, loaded 2-core Xeon): 0.57x conv1d's time at
(B, T, C) = (64, 64, 192), 0.66x at (64, 64, 384) with bias, 0.32x at (1, 8192, 384), 0.28x at
(1, 8192, 512). Other devices keep conv1d (cuDNN's depthwise kernels: the GPU check measured
that path, not this one).

The weight's gradient reads xx and the output gradient by blocks of rows that stay in a core's
cache for all K taps: K whole-tensor products, each written out and summed, took 3-5x as long at
(1, 8192, 512), where these are 16 MiB tensors read cold (commit b1c1155).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_depthwise_conv(xx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """xx (B, T + K - 1, C), weight (C, 1, K) as nn.Conv1d keeps it, bias (C,) -> y (B, T, C)."""
    if xx.device.type != "cpu":
        y = F.conv1d(xx.transpose(1, 2).contiguous(), weight, bias, groups=weight.shape[0])  # (B, C, T)
        return y.transpose(1, 2).contiguous()  # (B, T, C)
    if bias is None:
        return _DepthwiseConvCPU.apply(xx, weight[:, 0, :])  # (B, T, C)
    return _DepthwiseConvCPU.apply(xx, weight[:, 0, :], bias.to(xx.dtype))  # (B, T, C) the bias added by the conv


def _as_image(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).unsqueeze(2)  # (B, T, C) -> (B, C, 1, T), channels-last strides, no copy


class _DepthwiseConvCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xx: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        ctx.save_for_backward(xx, w)
        y = F.conv2d(_as_image(xx), w[:, None, None, :], bias, groups=w.shape[0])  # (B, C, 1, T) bias in the pass
        return y.squeeze(2).transpose(1, 2)  # (B, T, C), contiguous (channels last)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xx, w = ctx.saved_tensors
        K = w.shape[1]
        gy = grads[0].to(xx.dtype).contiguous()  # (B, T, C) in the input's dtype (autocast ran the forward lower)
        # dL/dxx[s] = sum_j w[j] gy[s - j]: the convolution of the gradient, K - 1 zeros each side (the
        # convolution's own padding, not a padded copy: 0.35-0.45x the time), with the flipped kernel
        flipped = w.flip(-1)[:, None, None, :].to(xx.dtype)  # (C, 1, 1, K)
        gx = F.conv2d(_as_image(gy), flipped, groups=w.shape[0], padding=(0, K - 1))  # (B, C, 1, T')
        gw = _weight_grad(xx, gy, K)  # (C, K)
        out: list[torch.Tensor | None] = [gx.squeeze(2).transpose(1, 2), gw.to(w.dtype)]  # (B, T', C), (C, K)
        if len(ctx.needs_input_grad) == 3:  # called with a bias
            out.append(gy.sum((0, 1)) if ctx.needs_input_grad[2] else None)  # (C,)
        return tuple(out)


BLOCK_FLOATS = 2**17  # rows x channels per block: 512 KiB of fp32, a core's L2 on the CPUs measured


def _weight_grad(xx: torch.Tensor, gy: torch.Tensor, K: int) -> torch.Tensor:
    """dL/dw[c, j] = sum_{b, t} xx[b, t + j, c] gy[b, t, c], xx (B, T + K - 1, C), gy (B, T, C) -> (C, K),
    summed block by block: about BLOCK_FLOATS / C rows at a time (whole sequences when T is short,
    part of one when long), each block's products for the K taps made while it is in cache, and
    accumulated in fp32 at least."""
    B, T, C = gy.shape
    acc = torch.zeros(K, C, dtype=torch.promote_types(xx.dtype, torch.float32), device=xx.device)  # (K, C)
    rows = max(1, BLOCK_FLOATS // C)  # rows per block
    span = min(T, rows)  # positions per block
    seqs = max(1, rows // T) if span == T else 1  # sequences per block
    for b in range(0, B, seqs):
        for s in range(0, T, span):
            g = gy[b : b + seqs, s : s + span]  # (b', t', C)
            for j in range(K):
                acc[j] += (xx[b : b + seqs, s + j : s + j + g.shape[1]] * g).sum((0, 1), dtype=acc.dtype)  # (C,)
    return acc.T  # (C, K)
