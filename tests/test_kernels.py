"""The `linear` and `heinsen` variants (issue 5): chunked = quadratic = token-by-token,
accuracy against float64, overflow-free log space, functional state, the Heinsen
reference model, no future leak. Everything goes through the registry or build_model.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import Backbone, ModelConfig
from attnbench.registry.loader import load_registry
from tests.helpers import grad

VARIANTS = ("linear", "heinsen")


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def make_config(
    registry,
    name: str,
    d_model: int = 32,
    n_head: int = 2,
    chunk: int | None = None,
    n_layer: int = 2,
    context: int = 512,
) -> ModelConfig:
    opts = registry.get(name).make_options({} if chunk is None else {"chunk_size": chunk})
    return ModelConfig(vocab_size=256, d_model=d_model, n_layer=n_layer, n_head=n_head, context=context, options=opts)


def make_mixer(registry, name: str, cfg: ModelConfig, qk_std: float = 0.3, seed: int = 0):
    """A bare mixer whose q, k (and v) projections are large enough to make attention peaked."""
    torch.manual_seed(seed)
    mixer = registry.get(name).build_mixer(cfg, 0)
    with torch.no_grad():
        mixer.c_attn.weight.normal_(0.0, qk_std)
    return mixer.eval()


def heads(mixer, x: torch.Tensor, n_head: int) -> list[torch.Tensor]:
    """q, k, v (B, H, T, h) as the mixer projects them."""
    B, T, D = x.shape
    return [t.view(B, T, n_head, -1).transpose(1, 2) for t in mixer.c_attn(x).split(D, dim=2)]


class AttentionOutput:
    """Captures what a mixer feeds its output projection (the attention output, (B, T, D))."""

    def __init__(self, mixer) -> None:
        self.seen: list[torch.Tensor] = []
        mixer.c_proj.register_forward_pre_hook(lambda mod, args: self.seen.append(args[0].detach()))

    def take(self) -> torch.Tensor:
        out, self.seen = torch.cat(self.seen, dim=1), []
        return out  # (B, T, D)


def quadratic(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The T x T formulation of each variant, in q's dtype: (B, H, T, h) -> (B, T, H h)."""
    T = q.shape[2]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T)
    if name == "linear":  # phi = elu + 1, eps 1e-6 after the dot product
        a = ((F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-1, -2)).masked_fill(future, 0.0)  # (B, H, T, T)
        y = a @ v / (a.sum(-1, keepdim=True) + 1e-6)  # (B, H, T, h)
    else:  # log of the exp-feature mixture of exp(log V), fully in log space
        s = torch.logsumexp(q[..., :, None, :] + k[..., None, :, :], dim=-1)  # (B, H, T, T)
        s = s.masked_fill(future, -math.inf)
        y = torch.logsumexp(s[..., None] + v[..., None, :, :], dim=-2) - torch.logsumexp(s, -1)[..., None]
    B, H, _, h = y.shape
    return y.transpose(1, 2).reshape(B, T, H * h)  # (B, T, H h)


def step_through(model, x: torch.Tensor, sizes: tuple[int, ...], state):
    outs, pos, i = [], 0, 0
    while pos < x.shape[1]:
        n = min(sizes[i % len(sizes)], x.shape[1] - pos)
        y, state = model.step(x[:, pos : pos + n], state)
        outs.append(y)
        pos, i = pos + n, i + 1
    return torch.cat(outs, dim=1), state


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("chunk", [7, 16, 128])
def test_chunked_equals_quadratic_and_token_by_token(registry, name, chunk):
    T = 100  # several chunks, and neither 7 nor 16 divides it; 128: training's one-chunk form
    cfg = make_config(registry, name, chunk=chunk)
    mixer = make_mixer(registry, name, cfg)
    attn = AttentionOutput(mixer)
    x = torch.randn(2, T, cfg.d_model, generator=torch.Generator().manual_seed(1))  # (B, T, D)
    with torch.no_grad():
        y = mixer(x)  # (B, T, D)
        chunked = attn.take()
        full = quadratic(name, *heads(mixer, x, cfg.n_head))
        assert (chunked - full).abs().max() < 1e-5
        for sizes in ((1,), (5, 1, 13)):
            y_step, _ = step_through(mixer, x, sizes, mixer.init_state(2, T))
            assert (attn.take() - full).abs().max() < 1e-5, sizes
            assert (y_step - y).abs().max() < 1e-5, sizes


@pytest.mark.parametrize("name", VARIANTS)
def test_error_against_float64_quadratic_at_4096(registry, name):
    T = 4096
    cfg = make_config(registry, name, d_model=64, n_head=2, context=T)  # h = 32, default chunk
    mixer = make_mixer(registry, name, cfg, qk_std=1 / 8)  # q, k ~ N(0, 1)
    attn = AttentionOutput(mixer)
    x = torch.randn(1, T, cfg.d_model, generator=torch.Generator().manual_seed(2))  # (1, T, D)
    with torch.no_grad():
        mixer(x)
        got = attn.take().double()  # (1, T, D) fp32 chunked kernel
        q, k, v = (t.double() for t in heads(mixer, x, cfg.n_head))  # (1, H, T, h)
        causal = torch.ones(T, T, dtype=torch.float64).tril()  # (T, T)
        for h in range(cfg.n_head):  # float64, one head at a time: (T, T) fits
            if name == "linear":
                a = ((F.elu(q[0, h]) + 1) @ (F.elu(k[0, h]) + 1).T) * causal  # (T, T)
                ref = a @ v[0, h] / (a.sum(-1, keepdim=True) + 1e-6)  # (T, h)
            else:  # exp(q) exp(k)^T cannot overflow float64 at this scale
                a = (q[0, h].exp() @ k[0, h].exp().T) * causal  # (T, T)
                ref = (a @ v[0, h].exp()).log() - a.sum(-1, keepdim=True).log()  # (T, h)
            width = ref.shape[-1]
            err = (got[0, :, h * width : (h + 1) * width] - ref).abs().max().item()
            assert err <= 1e-4, (h, err)


def log_direct64(q: torch.Tensor, k: torch.Tensor, log_v: torch.Tensor) -> torch.Tensor:
    """Heinsen's equation term by term in float64 log space, (B, H, T, h) -> (B, H, T, h)."""
    q, k, log_v = q.double(), k.double(), log_v.double()
    T = q.shape[2]
    s = torch.logsumexp(q[:, :, :, None, :] + k[:, :, None, :, :], dim=-1)  # (B, H, T, T) LSE_d(q_id + k_jd)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))  # (B, H, T, T) j <= i
    num = torch.logsumexp(s[..., None] + log_v[:, :, None], dim=3)  # (B, H, T, h)
    return num - torch.logsumexp(s, dim=-1, keepdim=True)  # (B, H, T, h)


def log_kernel(q, k, log_v, chunk):
    from attnbench.kernels.chunked import log_attention, log_init_state

    B, H, _, h = q.shape
    return log_attention(q, k, log_v, log_init_state(B, H, h, h, dtype=q.dtype), chunk)[0]  # (B, H, T, h)


def extreme_inputs(T: int, v_std: float, qk_std: float = 1.0, seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    q, k, log_v = (torch.randn(2, 2, T, 16, generator=g) * s for s in (qk_std, qk_std, v_std))  # (B, H, T, h)
    k[:, :, 3], log_v[:, :, 3] = -150.0, 200.0  # early token: tiny attention weight, huge value
    return q, k, log_v


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("v_std", [1.0, 20.0, 50.0])
def test_heinsen_accurate_and_causal_with_large_log_values(chunk, v_std):
    """Issue 17: log V of std up to 50 and the early extreme token; the kernel before the fix
    erred by 17-175 here and leaked 5.8-116 into earlier outputs."""
    T = 300
    q, k, log_v = extreme_inputs(T, v_std)
    got = log_kernel(q, k, log_v, chunk).double()  # (B, H, T, h) fp32 kernel
    ref = log_direct64(q, k, log_v)  # (B, H, T, h)
    assert ((got - ref).abs() / ref.abs().clamp_min(1.0)).max() <= 1e-4
    for t, dk, dv in ((150, 0.0, 90.0), (150, 50.0, 200.0), (100, 0.0, -200.0)):  # mid-chunk too
        k2, v2 = k.clone(), log_v.clone()
        k2[:, :, t] += dk
        v2[:, :, t] += dv
        moved = log_kernel(q, k2, v2, chunk)[:, :, :t].double()  # (B, H, t, h)
        assert ((moved - got[:, :, :t]).abs() / got[:, :, :t].abs().clamp_min(1.0)).max() <= 1e-6


def test_heinsen_accurate_with_large_logits_and_values():
    """fp32 stays accurate at q, k of std 10 (q_d + k_d up to ~60) with log V std 20."""
    q, k, log_v = extreme_inputs(200, 20.0, qk_std=10.0, seed=5)
    got = log_kernel(q, k, log_v, 32).double()  # (B, H, T, h)
    ref = log_direct64(q, k, log_v)  # (B, H, T, h)
    assert ((got - ref).abs() / ref.abs().clamp_min(1.0)).max() <= 1e-4


def test_heinsen_causal_and_finite_with_logits_scaled_100x(registry):
    """q and k x100: outputs and gradients finite, later inputs move no earlier output, and
    the float64 run equals the float64 direct equation. (fp32 is not accurate this far out:
    a row's q spread of ~10^2 leaves its pair weights below fp32's range; see log_attention.)"""
    T, chunk = 150, 32
    cfg = make_config(registry, "heinsen", chunk=chunk)
    mixer = make_mixer(registry, "heinsen", cfg)
    with torch.no_grad():
        mixer.c_attn.weight[: 2 * cfg.d_model] *= 100.0  # q and k rows: logits x100
    mixer.train()
    x = torch.randn(1, T, cfg.d_model, generator=torch.Generator().manual_seed(3)).requires_grad_()
    y = mixer(x)  # (1, T, D)
    y.square().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(grad(x)).all()
    assert all(torch.isfinite(grad(p)).all() for p in mixer.parameters())
    with torch.no_grad():
        x2 = x.detach().clone()
        x2[:, 70:] += 3.0 * torch.randn(1, T - 70, cfg.d_model)  # (1, T, D) later positions differ
        assert (mixer(x2)[:, :70] - y.detach()[:, :70]).abs().max() <= 1e-6 * y.detach()[:, :70].abs().max()
        q, k, v = heads(mixer.double(), x.detach().double(), cfg.n_head)  # (1, H, T, h) float64
        assert (log_kernel(q, k, v, chunk) - log_direct64(q, k, v)).abs().max() <= 1e-9
        y_step, _ = step_through(mixer, x.detach().double(), (1, 9), mixer.init_state(1, T, dtype=torch.float64))
        assert (y_step - mixer(x.detach().double())).abs().max() <= 1e-9


@pytest.mark.parametrize("name", VARIANTS)
def test_kernels_run_in_float64_when_given_float64(registry, name):
    cfg = make_config(registry, name, chunk=16)
    mixer = make_mixer(registry, name, cfg).double()
    x = torch.randn(2, 50, cfg.d_model, dtype=torch.float64)  # (B, T, D)
    with torch.no_grad():
        y = mixer(x)  # (B, T, D)
        y_step, state = step_through(mixer, x, (1, 7), mixer.init_state(2, 50, dtype=torch.float64))
    assert y.dtype == torch.float64 and y_step.dtype == torch.float64
    assert all(t.dtype == torch.float64 for t in vars(state).values())
    assert (y - y_step).abs().max() <= 1e-10 * y.abs().max()


@pytest.mark.parametrize("name", VARIANTS)
def test_step_returns_state_functionally(registry, name):
    cfg = make_config(registry, name, chunk=8)
    mixer = make_mixer(registry, name, cfg)
    x = torch.randn(2, 30, cfg.d_model)  # (B, T, D)
    with torch.no_grad():
        _, state = step_through(mixer, x[:, :20], (3,), mixer.init_state(2, 30))
        before = {k: v.clone() for k, v in vars(state).items()}
        y1, new = mixer.step(x[:, 20:], state)
        y2, _ = mixer.step(x[:, 20:], state)  # stepping twice from one state: same result
    for key, value in vars(state).items():
        assert torch.equal(value, before[key]), f"step modified the caller's state.{key}"
        assert getattr(new, key).untyped_storage().data_ptr() != value.untyped_storage().data_ptr()
        assert getattr(new, key).untyped_storage().nbytes() == value.untyped_storage().nbytes()
    assert torch.equal(y1, y2)


@pytest.mark.parametrize("name", VARIANTS)
def test_no_future_leak_across_chunks(registry, name):
    T, t = 70, 33  # chunk 16: t sits inside the third chunk
    cfg = make_config(registry, name, chunk=16)
    mixer = make_mixer(registry, name, cfg).train()
    x = torch.randn(2, T, cfg.d_model, generator=torch.Generator().manual_seed(4)).requires_grad_()
    y = mixer(x)  # (B, T, D)
    (g,) = torch.autograd.grad(y[:, t].sum(), x)
    assert g[:, t + 1 :].abs().max() == 0.0 and g[:, : t + 1].abs().max() > 0
    bumped = x.detach().clone()
    bumped[:, t + 1 :] += 3.0 * torch.randn(2, T - t - 1, cfg.d_model)
    with torch.no_grad():
        assert (mixer(bumped)[:, : t + 1] - y.detach()[:, : t + 1]).abs().max() < 1e-6


@pytest.mark.parametrize("name", VARIANTS)
def test_bf16_autocast_keeps_fp32_state(registry, name):
    cfg = make_config(registry, name, chunk=8)
    mixer = make_mixer(registry, name, cfg, qk_std=0.1)
    x = torch.randn(1, 24, cfg.d_model)  # (B, T, D)
    with torch.no_grad():
        ref = mixer(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = mixer(x)
            _, state = mixer.step(x, mixer.init_state(1, 24))
    assert torch.isfinite(y).all() and (y.float() - ref).abs().max() < 0.05 * ref.abs().max() + 1e-3
    assert all(t.dtype == torch.float32 for t in vars(state).values())


def test_options_are_validated(registry):
    for name in VARIANTS:
        with pytest.raises(ValueError, match="chunk_size"):
            registry.get(name).make_options({"chunk_size": 0})
    with pytest.raises(ValueError, match="eps"):
        registry.get("linear").make_options({"eps": -1.0})


# ---- Heinsen's reference model -------------------------------------------------------


def own_model(registry, chunk: int = 16, seed: int = 0):
    cfg = make_config(registry, "heinsen", chunk=chunk)
    torch.manual_seed(seed)
    return registry.get("heinsen").build_model(cfg).eval(), cfg


def test_reference_model_forward_loss_and_step_agree(registry):
    model, cfg = own_model(registry)
    idx = torch.randint(0, cfg.vocab_size, (2, 90), generator=torch.Generator().manual_seed(5))  # (B, T)
    with torch.no_grad():
        out = model(idx[:, :-1], targets=idx[:, 1:])
        ce = F.cross_entropy(out.logits.reshape(-1, cfg.vocab_size), idx[:, 1:].reshape(-1))
        assert torch.allclose(out.loss, ce) and torch.allclose(out.ce, ce)
        scale = out.logits.abs().max()
        for sizes in ((1,), (7, 1, 40)):
            logits, state = step_through(model, idx[:, :-1], sizes, model.init_state(2, 89))
            assert (logits - out.logits).abs().max() < 1e-5 * scale, sizes
    # The state is explicit and constant-size: each tensor owns only its own storage.
    tensors = [state.log_x] + [t for layer in state.layers for t in vars(layer).values()]
    assert state.log_x.shape == (2, cfg.d_model)
    for t in tensors:
        assert t.dtype == torch.float32 and t.untyped_storage().nbytes() == t.numel() * 4


def test_reference_model_repr_and_parameter_count(registry):
    model, _ = own_model(registry)
    assert "d_emb=32" in repr(model)  # the reference raises NameError here
    ref = ModelConfig(vocab_size=50304, d_model=768, n_layer=24, n_head=24, context=1024)
    with torch.device("meta"):  # count without allocating the 125M parameters
        big = registry.get("heinsen").build_model(ref)
    assert big.num_params() == 124_879_872  # spec 5.3
    assert big.embed.weight is not None and not hasattr(big, "lm_head")  # tied head


def test_reference_model_no_future_leak(registry):
    model, cfg = own_model(registry)
    idx = torch.randint(0, cfg.vocab_size, (2, 60), generator=torch.Generator().manual_seed(6))  # (B, T)
    bumped = idx.clone()
    bumped[:, 31:] = (bumped[:, 31:] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, b = model(idx).logits, model(bumped).logits
    assert (a[:, :31] - b[:, :31]).abs().max() < 1e-6 * a.abs().max()
    assert (a[:, 31:] - b[:, 31:]).abs().max() > 1e-3


def test_position_recurrence_stays_accurate_at_long_T(registry):
    """x_t = sigmoid(a_t) x_{t-1} + exp(l_t), x_0 = 1, against a float64 loop at T = 4096
    (the reference's cumsum drifts to 3e-4 in fp32 there; bf16 is garbage)."""
    model, cfg = own_model(registry)
    embed_pos, T, d = model.embed_pos, 4096, cfg.d_model
    with torch.no_grad():
        embed_pos.proj.weight.normal_(0.0, 0.5)  # a, log b ~ N(0, 8): decays from ~0 to ~1
        x = torch.randn(1, T, d, generator=torch.Generator().manual_seed(7))  # (1, T, d)
        out, last = embed_pos(x, torch.zeros(1, d))
        a, log_b = embed_pos.proj(x).double().chunk(2, dim=-1)  # (1, T, d) each
        log_x, ref = torch.zeros(1, d, dtype=torch.float64), []
        for t in range(T):
            log_x = torch.logaddexp(F.logsigmoid(a[:, t]) + log_x, log_b[:, t])  # (1, d)
            ref.append(log_x)
        ref = torch.stack(ref, dim=1)  # (1, T, d)
    assert (out.double() - x.double() - ref).abs().max() < 2e-5
    assert (last.double() - ref[:, -1]).abs().max() < 2e-5


def test_backbone_mixers_train_a_step(registry):
    """Both mixers in the shared backbone: finite loss and gradients, loss goes down."""
    for name in VARIANTS:
        cfg = make_config(registry, name, chunk=16)
        torch.manual_seed(0)
        model = Backbone(cfg, registry.get(name).build_mixer)
        idx = torch.randint(0, 256, (2, 65), generator=torch.Generator().manual_seed(8))  # (B, T)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(5):
            loss = model(idx[:, :-1], targets=idx[:, 1:]).loss
            loss.backward()
            assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        assert losses[-1] < losses[0], (name, losses)


@pytest.mark.parametrize("chunk", [5, 64])
def test_linear_hand_written_backward_matches_autograd_of_the_cumsum_form(registry, chunk):
    """The chunked kernel's own backward (scores recomputed, states carried) gives the
    gradients plain autograd gives for the cumulative sum of outer products, for every
    parameter and the input, with a chunk that does not divide T."""
    cfg = make_config(registry, "linear", chunk=chunk)
    mixer = make_mixer(registry, "linear", cfg).train()
    x = torch.randn(2, 45, cfg.d_model, generator=torch.Generator().manual_seed(5)).requires_grad_()
    w = torch.randn(2, 45, cfg.d_model, generator=torch.Generator().manual_seed(6))
    (mixer(x) * w).sum().backward()
    ours = [grad(x).clone()] + [grad(p).clone() for p in mixer.parameters()]
    x.grad = None
    mixer.zero_grad()
    q, k, v = heads(mixer, x, cfg.n_head)
    fq, fk = F.elu(q) + 1, F.elu(k) + 1  # (B, H, T, h)
    S = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=2)  # (B, H, T, h, h)
    num = (fq[..., :, None] * S).sum(-2)  # (B, H, T, h)
    den = (fq * fk.cumsum(2)).sum(-1, keepdim=True) + cfg.options.eps  # (B, H, T, 1)
    y = mixer.c_proj((num / den).transpose(1, 2).reshape(2, 45, cfg.d_model))  # (B, T, D)
    (y * w).sum().backward()
    reference = [x.grad] + [p.grad for p in mixer.parameters()]
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("T", [48, 64, 100])
def test_linear_attention_from_no_state_equals_the_empty_state_with_its_gradients(T):
    """state None (training): the one-chunk quadratic form up to the chunk's length, the
    chunked scan above it; outputs and gradients those of an explicit zero state, no state out."""
    from attnbench import linear_attention, linear_init_state

    g = torch.Generator().manual_seed(T)
    fq, fk = (torch.rand(2, 3, T, 12, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2))
    v = torch.randn(2, 3, T, 5, generator=g, dtype=torch.float64).requires_grad_()  # (B, H, T, h_v)
    got, none = linear_attention(fq, fk, v, None, 64, 1e-6)
    ref, _ = linear_attention(fq, fk, v, linear_init_state(2, 3, 12, 5, dtype=torch.float64), 64, 1e-6)
    assert none is None
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(
        torch.autograd.grad(got.square().sum(), (fq, fk, v)),
        torch.autograd.grad(ref.square().sum(), (fq, fk, v)),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
