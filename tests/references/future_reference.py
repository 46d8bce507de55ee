"""REFERENCE ONLY — not used by the plugin. The explicit formulation of future attention.

Spec sections 6.3 and 6.4, written as directly as possible with full (T, T_w) matrices,
T_w = min(T + fd, C): A = s Q K^T, F = s Q K_future[:, :, :T_w-1], the omni logits O
(A where j <= i, F[:, j-1] where i < j <= i + fd, -inf elsewhere), P = softmax(O),
y = P_causal V + P_band V_future, and the target softmax over the true scores with
j <= min(i + fd, T - 1). Used by tests (equivalence with the lean path) and
benchmarks (memory and time of the straightforward implementation) only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench import AuxLoss, MixerOutput


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_future: torch.Tensor,
    v_future: torch.Tensor,
    fd: int,
    context: int,
    dropout_p: float = 0.0,
    k_bias: torch.Tensor | None = None,
    v_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation 6.3 per head: returns (y, out_future), both (B, H, T, h). k_bias (H, 1, C-1)
    and v_bias (H, 1, h): the reference's future K/V projection biases (with bias on)."""
    T = q.size(2)
    T_w = min(T + fd, context)
    scale = 1.0 / math.sqrt(q.size(-1))
    A = (q @ k.transpose(-1, -2)) * scale  # (B, H, T, T)
    Fs = q @ k_future[:, :, : T_w - 1]  # (B, H, T, T_w-1) column c: position c+1
    if k_bias is not None:
        Fs = Fs + k_bias[:, :, : T_w - 1]  # (B, H, T, T_w-1) bias before the scale
    Fs = Fs * scale  # (B, H, T, T_w-1)
    i = torch.arange(T, device=q.device)[:, None]  # (T, 1)
    j = torch.arange(T_w, device=q.device)[None, :]  # (1, T_w)
    causal = j <= i  # (T, T_w)
    band = (j > i) & (j <= i + fd)  # (T, T_w)
    A_pad = F.pad(A, (0, T_w - T))  # (B, H, T, T_w)
    F_pad = F.pad(Fs, (1, 0))  # (B, H, T, T_w) column j holds F[:, j-1]
    S = torch.where(causal, A_pad, torch.where(band, F_pad, float("-inf")))  # (B, H, T, T_w) scores
    P = torch.softmax(S, dim=-1)  # (B, H, T, T_w)
    P = F.dropout(P, dropout_p) if dropout_p > 0 else P  # (B, H, T, T_w)
    y_causal = (P * causal)[..., :T] @ v  # (B, H, T, h)
    out_future = (P * band)[..., 1:] @ v_future[:, : T_w - 1]  # (B, H, T, h)
    if v_bias is not None:
        out_future = out_future + v_bias  # (B, H, T, h) every row
    return y_causal + out_future, out_future


def reference_target(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fd: int) -> torch.Tensor:
    """Equation 6.4: out* (B, H, T, h), the band part of softmax over j <= min(i+fd, T-1)."""
    T = q.size(2)
    A = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1))  # (B, H, T, T)
    i = torch.arange(T, device=q.device)[:, None]  # (T, 1)
    j = torch.arange(T, device=q.device)[None, :]  # (1, T)
    P_true = torch.softmax(A.masked_fill(j > i + fd, float("-inf")), dim=-1)  # (B, H, T, T)
    band = (j > i) & (j <= i + fd)  # (T, T)
    return (P_true * band) @ v  # (B, H, T, h)


def reference_loss(out_future: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    if loss_type == "mse":
        return ((out_future - target) ** 2).mean()  # () over (B, H, T, h)
    cos = F.cosine_similarity(out_future, target, dim=-1)  # (B, H, T)
    return ((1.0 - cos) / 2).mean()


def reference_forward(mixer, x: torch.Tensor):
    """A ``attnbench.plugins.attention.future_model.FutureAttention``'s forward, computed the explicit way with its
    own parameters and options (same return convention: MixerOutput in training)."""
    opts = mixer.opts
    q, k, v = mixer._heads(x)  # (B, H, T, h)
    p = mixer.dropout if mixer.training else 0.0
    y, out_future = reference_attention(
        q,
        k,
        v,
        mixer.k_future,
        mixer.v_future,
        opts.future_dim,
        mixer.context,
        p,
        mixer.k_future_bias,
        mixer.v_future_bias,
    )  # (B, H, T, h)
    out = mixer._merge(y)  # (B, T, D)
    if not (mixer.training and opts.use_future_attn_loss):
        return out
    if opts.detach_target:
        with torch.no_grad():
            target = reference_target(q, k, v, opts.future_dim)  # (B, H, T, h)
    else:
        target = reference_target(q, k, v, opts.future_dim)  # (B, H, T, h)
    loss = reference_loss(out_future, target, opts.loss_type)  # ()
    return MixerOutput(out, (AuxLoss("future_attn", loss, float(opts.loss_coeff)),))
