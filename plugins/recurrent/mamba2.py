"""Mamba2 (Dao & Gu 2024, "Transformers are SSMs", sec. 7 and Fig. 6), per head with a
scalar decay (SSD):

    [z, xBC, dt] = W_in u;   [x, B, C] = silu(conv1d_causal(xBC));   dt = softplus(dt + dt_bias)
    S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T,   y_t = S_t^T C_t + D x_t,   A = -exp(A_log) < 0
    out = W_out RMSNorm(y * silu(z))

x has expand * D channels in H = n_head heads of P = expand * D / H; B and C (d_state each)
are shared by the heads of a group (n_groups). Training runs ``ssd_kernel.ssd_scan``
(chunked); decoding carries the convolution's last d_conv - 1 inputs and S (B, H, N_s, P).
The mixer (``Mamba2``), its decode state and attention maps are in ``mamba2_model``; this module
holds its options and registers them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.checks import KERNELS, check_kernel, check_positive_int
from attnbench.plugins.recurrent.flops import ssd_flops_per_token

MODEL = "attnbench.plugins.recurrent.mamba2_model"  # torch: imported when the first mixer is built


FLA_SSD_OP = "fla.ops.simple_gla.chunk_simple_gla"


@dataclass(frozen=True)
class Mamba2Options:
    """d_state: N_s, the size of B and C. d_conv: the causal convolution's width. expand:
    inner width / d_model. n_groups: groups of heads sharing B and C. chunk_size: positions
    per chunk of the training form. dt_min, dt_max: range of the initial step sizes.
    kernel: chunked (ours) or fla (simple GLA's Triton kernel, CUDA only; decoding stays on ours)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kernel": KERNELS}
    d_state: int = 128
    d_conv: int = 4
    expand: int = 2
    n_groups: int = 1
    chunk_size: int = 64
    dt_min: float = 0.001
    dt_max: float = 0.1
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        for name in ("d_state", "d_conv", "expand", "n_groups", "chunk_size"):
            check_positive_int(name, getattr(self, name))
        if not (
            isinstance(self.dt_min, (int, float))
            and isinstance(self.dt_max, (int, float))
            and 0 < self.dt_min <= self.dt_max
        ):
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={self.dt_min!r}, dt_max={self.dt_max!r}")
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> Mamba2Options:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, Mamba2Options) else Mamba2Options()


def dims(config: ModelConfig) -> tuple[int, int, int]:
    """(inner width, head size P, convolution channels), checked against the config."""
    opts = options_of(config)
    inner = opts.expand * config.d_model
    if inner % config.n_head or config.n_head % opts.n_groups:
        raise ValueError(
            f"mamba2 needs n_head ({config.n_head}) to divide expand * d_model ({inner}) "
            f"and n_groups ({opts.n_groups}) to divide n_head"
        )
    return inner, inner // config.n_head, inner + 2 * opts.n_groups * opts.d_state


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    opts = options_of(config)
    inner, head_dim, conv_dim = dims(config)
    return (opts.d_conv - 1) * conv_dim + config.n_head * opts.d_state * head_dim  # independent of T


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """Input and output projections, the depthwise convolution, and the chunked SSD scan."""
    opts = options_of(config)
    inner, head_dim, conv_dim = dims(config)
    d = config.d_model
    proj = 2.0 * d * (inner + conv_dim + config.n_head) + 2.0 * inner * d
    return (
        proj
        + 2.0 * conv_dim * opts.d_conv
        + ssd_flops_per_token(config.n_head, opts.d_state, head_dim, opts.chunk_size, T, opts.n_groups)
    )


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="mamba2",
            build_mixer=f"{MODEL}:Mamba2",
            options=Mamba2Options,
            decode="recurrent",
            description=(
                "Mamba2 (Dao & Gu 2024): SSD with a scalar decay per head, short convolution, gated RMSNorm; "
                "chunked, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
