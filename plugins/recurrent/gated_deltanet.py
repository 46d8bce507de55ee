"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks", eq. 10 and the
block of section 3.4): DeltaNet (``deltanet``) with a scalar decay per head and an output gate,

    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    log a_t = -exp(A_log) * softplus(x_t W_a + dt_bias)         (Mamba2's decay, per head)
    y = W_o (norm_head(o) * swish(x W_g))

A_log ~ log U(1, 16) and dt ~ logU(1e-3, 1e-1) (dt_bias = softplus^-1(dt)), as in Mamba2.
q and k are normalised exactly, as in ``deltanet``, where fla divides by sqrt(||x||^2 + 1e-6).
The mixer (``GatedDeltaNet``) is in ``gated_deltanet_model``; this module registers it without
importing torch.
"""

from __future__ import annotations

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent import deltanet
from attnbench.plugins.recurrent.deltanet import DeltaOptions

MODEL = "attnbench.plugins.recurrent.gated_deltanet_model"  # torch: imported when the first mixer is built


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """DeltaNet's, plus the output gate 2 d^2 and the decay projection 2 d H."""
    return (
        deltanet.flops_per_token(config, layer_idx, T) + 2.0 * config.d_model**2 + 2.0 * config.d_model * config.n_head
    )


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="gated_deltanet",
            build_mixer=f"{MODEL}:GatedDeltaNet",
            options=DeltaOptions,
            decode="recurrent",
            description=(
                "Gated DeltaNet (Yang et al. 2025): delta rule with a decay per head, WY-chunked, recurrent decoding"
            ),
            state_size=deltanet.state_size,
            flops_per_token=flops_per_token,
            version="1",
        )
    )
