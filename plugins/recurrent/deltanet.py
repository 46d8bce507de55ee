"""DeltaNet (Schlag et al. 2021; Yang et al. 2024, "Parallelizing Linear Transformers with
the Delta Rule over Sequence Length", section 3 and the architecture of section 4), per head:

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t / sqrt(h)
    [q, k, v] = SiLU(ShortConv([x W_q, x W_k, x W_v])),  q, k L2-normalised,  beta_t = sigmoid(x_t W_b)
    y = W_o norm_head(o)

Training runs the WY-form chunked kernel (``delta_kernel``); decoding carries S and the
short convolution's last K - 1 inputs. ``gated_deltanet`` builds on this module.
q and k are normalised exactly (x / ||x||, as ``F.normalize``, taken as x * rsqrt(||x||^2): a
product's backward is cheaper than a quotient's), where fla divides by sqrt(||x||^2 + 1e-6):
a relative difference of about 5e-7 / ||x||^2.
The mixer (``DeltaNet``) and its decode state are in ``deltanet_model``; this module holds its
options and registers them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.recurrent.checks import check_kernel, check_positive_int
from attnbench.plugins.recurrent.flops import delta_flops_per_token

MODEL = "attnbench.plugins.recurrent.deltanet_model"  # torch: imported when the first mixer is built


@dataclass(frozen=True)
class DeltaOptions:
    """chunk_size: positions per chunk of the WY form. conv_size: width of the short causal
    convolution on q, k, v (0: none, SiLU only). kernel: chunked (ours) or fla (CUDA only;
    decoding stays on ours)."""

    chunk_size: int = 64
    conv_size: int = 4
    kernel: str = "chunked"

    def __post_init__(self) -> None:
        check_positive_int("chunk_size", self.chunk_size)
        check_positive_int("conv_size", self.conv_size, minimum=0)
        check_kernel(self.kernel)


def options_of(config: ModelConfig) -> DeltaOptions:
    """The config's options, or the defaults when it carries none."""
    return config.options if isinstance(config.options, DeltaOptions) else DeltaOptions()


def state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    """S per head plus the last K - 1 projected [q, k, v] of the short convolution."""
    conv = options_of(config).conv_size
    return config.n_head * config.head_dim**2 + max(conv - 1, 0) * 3 * config.d_model


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    """q, k, v, output projections 8 d^2, beta 2 d H, short convolution 2 K 3d, plus the kernel."""
    opts, D, h = options_of(config), config.d_model, config.head_dim
    return (
        8.0 * D * D
        + 2.0 * D * config.n_head
        + 6.0 * opts.conv_size * D
        + delta_flops_per_token(config.n_head, h, h, opts.chunk_size, T)
    )


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="deltanet",
            build_mixer=f"{MODEL}:DeltaNet",
            options=DeltaOptions,
            decode="recurrent",
            description=(
                "DeltaNet (delta rule; Yang et al. 2024): chunked in the WY form, short convolution, recurrent decoding"
            ),
            state_size=state_size,
            flops_per_token=flops_per_token,
            version="1",
        )
    )
