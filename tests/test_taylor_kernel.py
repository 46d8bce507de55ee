"""Based's Taylor kernel (scores inside a chunk from q~.k~, the 1 + f + f^2 features only for
the carried state) against the equation written out per token, and against the shared
feature-space kernel it replaced: outputs, gradients and the state, in float64."""

from __future__ import annotations

import pytest
import torch

from attnbench import LinearState, linear_attention, linear_init_state
from attnbench.plugins.attention.linear_model import taylor_features
from attnbench.plugins.recurrent.taylor_kernel import taylor_attention
from tests.helpers import Tolerance

F64 = torch.float64
TIGHT = Tolerance(rtol=1e-10, atol=1e-10)
B, H, f, h, EPS = 2, 3, 4, 5, 1e-6


def _inputs(T: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    qf, kf = (torch.randn(B, H, T, f, generator=gen, dtype=F64, requires_grad=True) for _ in range(2))
    v = torch.randn(B, H, T, h, generator=gen, dtype=F64, requires_grad=True)  # (B, H, T, h)
    return qf, kf, v


def _start(seed: int) -> LinearState:
    """A non-empty state as a prefix leaves it: the rows of x_a x_b and x_b x_a equal, z > 0."""
    gen = torch.Generator().manual_seed(seed)
    s, z = (
        torch.randn(B, H, 1 + f + f * f, h, generator=gen, dtype=F64),
        torch.rand(B, H, 1 + f + f * f, generator=gen, dtype=F64),
    )
    pairs_s, pairs_z = s[:, :, 1 + f :].unflatten(2, (f, f)), z[:, :, 1 + f :].unflatten(2, (f, f))  # (B, H, f, f, .)
    s[:, :, 1 + f :] = ((pairs_s + pairs_s.transpose(2, 3)) / 2).flatten(2, 3)
    z[:, :, 1 + f :] = ((pairs_z + pairs_z.transpose(2, 3)) / 2).flatten(2, 3)
    return LinearState(s, z + 1)


def test_a_state_with_unequal_pair_rows_reads_as_their_sum():
    """Only rows (a, b) + (b, a) reach an output: moving mass between them changes nothing."""
    qf, kf, v = _inputs(11, seed=5)
    start = _start(5)
    shifted = start.s.clone()
    shifted[:, :, 1 + f + 1] += 3.0  # row (0, 1)
    shifted[:, :, 1 + f + f] -= 3.0  # row (1, 0)
    a, _ = taylor_attention(qf, kf, v, start, 4, EPS)
    b, _ = taylor_attention(qf, kf, v, LinearState(shifted, start.z), 4, EPS)
    torch.testing.assert_close(a, b, **TIGHT)


def _loop(qf, kf, v, start: LinearState) -> torch.Tensor:
    """o_i = (phi(q_i)^T S_0 + sum_{j<=i} w_ij v_j) / (phi(q_i)^T z_0 + sum_{j<=i} w_ij + eps),
    w_ij = 1 + s + s^2 / 2, s = q~_i.k~_j / sqrt(f): one position at a time."""
    out = []
    for i in range(qf.shape[2]):
        s = (kf[:, :, : i + 1] @ qf[:, :, i, :, None]).squeeze(-1) / f**0.5  # (B, H, i+1)
        w = 1 + s + s * s / 2  # (B, H, i+1)
        phi_q = taylor_features(qf[:, :, i])  # (B, H, F)
        num = (phi_q[..., None] * start.s).sum(-2) + (w[..., None] * v[:, :, : i + 1]).sum(2)  # (B, H, h)
        den = (phi_q * start.z).sum(-1) + w.sum(-1)  # (B, H)
        out.append(num / (den[..., None] + EPS))
    return torch.stack(out, dim=2)  # (B, H, T, h)


@pytest.mark.parametrize(("T", "chunk", "with_state"), [(13, 8, False), (8, 8, False), (21, 8, True), (5, 16, True)])
def test_taylor_kernel_equals_the_equation_per_token(T, chunk, with_state):
    qf, kf, v = _inputs(T, seed=T)
    start = _start(T) if with_state else linear_init_state(B, H, 1 + f + f * f, h, dtype=F64)
    got, _ = taylor_attention(qf, kf, v, start if with_state else None, chunk, EPS)  # (B, H, T, h)
    torch.testing.assert_close(got, _loop(qf, kf, v, start), **TIGHT)


@pytest.mark.parametrize(("T", "chunk", "with_state"), [(29, 8, False), (64, 64, False), (70, 16, True)])
def test_taylor_kernel_equals_the_feature_space_kernel_with_gradients(T, chunk, with_state):
    qf, kf, v = _inputs(T, seed=100 + T)
    start = _start(T) if with_state else None
    ours, ours_state = taylor_attention(qf, kf, v, start, chunk, EPS)
    ref, ref_state = linear_attention(taylor_features(qf), taylor_features(kf), v, start, chunk, EPS)
    torch.testing.assert_close(ours, ref, **TIGHT)
    weights = torch.randn_like(ref)  # a loss that weighs every output differently
    for a, b in zip(
        torch.autograd.grad((ours * weights).sum(), (qf, kf, v)),
        torch.autograd.grad((ref * weights).sum(), (qf, kf, v)),
        strict=True,
    ):
        torch.testing.assert_close(a, b, **TIGHT)
    if start is not None:
        assert ours_state is not None and ref_state is not None
        torch.testing.assert_close(ours_state.s, ref_state.s, **TIGHT)
        torch.testing.assert_close(ours_state.z, ref_state.z, **TIGHT)
        assert not torch.equal(ours_state.s, start.s)  # a new state; the given one is untouched below
        torch.testing.assert_close(start.s, _start(T).s, rtol=0, atol=0)
    else:
        assert ours_state is None


def test_taylor_kernel_computes_in_fp32_under_autocast_and_returns_the_input_dtype():
    qf, kf, v = (t.detach().to(torch.bfloat16) for t in _inputs(40, seed=7))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = taylor_attention(qf, kf, v, None, 16, EPS)
    ref, _ = taylor_attention(qf.double(), kf.double(), v.double(), None, 16, EPS)
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), ref, rtol=2e-2, atol=2e-2)  # bf16 rounding of the output only
