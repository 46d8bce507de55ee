"""RetNet's multi-scale retention (Sun et al. 2023, "Retentive Network", eq. 5-8), per head:

    o_i = sum_{j<=i} gamma^(i-j) (q_i . k_j / sqrt(h)) v_j,   gamma_head = 1 - 2^(-5 - head)
    y = W_o (swish(x W_g) * norm_head(o))

i.e. S_t = gamma S_{t-1} + k_t v_t^T, a fixed decay per head. The paper's xPos rotation of
q and k is left out (the shared backbone gives learned positions), and its GroupNorm is an
RMS norm per head. Training runs the chunked kernel (``gla_kernel``), decoding carries S.
Values are d wide (h per head), where the paper and fla widen them to 2d (``expand_v=2``).
The mixer (``Retention``), its decays (``log_decay``) and attention maps are in ``retnet_model``;
this module holds its options and registers them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.checks import check_kernel, check_positive_int
from attnbench.plugins.recurrent.flops import gla_flops_per_token

MODEL = "attnbench.plugins.recurrent.retnet_model"  # torch: imported when the first mixer is built


@dataclass(frozen=True)
class RetNetOptions:
    """chunk_size: positions per chunk of the training form. kernel: chunked (ours) or fla
    (flash-linear-attention's Triton kernel, CUDA only; decoding stays on ours)."""

    chunk_size: int = 64
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        check_positive_int("chunk_size", self.chunk_size)
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> RetNetOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, RetNetOptions) else RetNetOptions()


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return config.n_head * config.head_dim * config.head_dim  # S per head, independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """q, k, v, gate and output projections 10 d^2, plus the chunked kernel."""
    h = config.head_dim
    return 10.0 * config.d_model**2 + gla_flops_per_token(config.n_head, h, h, options_of(config).chunk_size, T, False)


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="retnet",
            build_mixer=f"{MODEL}:Retention",
            options=RetNetOptions,
            decode="recurrent",
            description=(
                "RetNet multi-scale retention (Sun et al. 2023): a fixed decay per head, chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
