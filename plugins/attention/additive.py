"""Causal additive attention (mtanghu's Fastformer, leap-transformer 0.1.1 = b587c27) and its
windowed form. Spec: shared/design/variants.md, sections 2 and 3.

    gq_i = Pool_k(norm(Q_i))   P_i = gq_i * K_i   gk_i = Pool_k(norm(P_i))   y_i = gk_i * V_i

* ``additive``: every layer pools over the whole prefix. O(d) decode state per layer
  (running sums), ``decode="recurrent"``.
* ``windowed``: layer l pools over its last k_l tokens, current one included; a window
  >= the model context is global. Decode keeps the last k entries per pooling
  (``decode="window"``) and re-sums them each step: exact, no running difference.

Both register the reference whole model (``build_model``: token + learned positions, the
attention's own LayerNorm, bias-free GELU MLP, tied ``proj_logits`` with its own bias).
Published configurations (d 128, 6 layers, 4 heads, context 2048): ``additive`` with
``{rescale: 15}``; ``windowed`` with ``{windows: [4, 8, 16, 32, 64, 2048], rescale: 10}``.

The layer, the model and their builders (torch) are in ``attnbench.plugins.attention.additive_model``,
the pooling kernel in ``attnbench.plugins.kernels.additive``; this module holds the options, the
analytic sizes and the registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from attnbench import ModelConfig, Variant, hookimpl
from attnbench.plugins.kernels.additive_spec import MAX_RESCALE, PoolSpec

MODEL = "attnbench.plugins.attention.additive_model"  # torch: imported when the first mixer is built


def _rule_seeds(n_layer: int, context: int) -> tuple[int, ...]:
    """b587c27's auto rule, the run behind 50.0: k_l = 4 * 2^l, only the last layer global."""
    return tuple(4 * 2**layer for layer in range(n_layer - 1)) + (context,)


def _rule_head(n_layer: int, context: int) -> tuple[int, ...]:
    """HEAD 77d1578's auto rule: k_l = 2 * 2^l, then the first and the last layer global."""
    ks = [2 * 2**layer for layer in range(n_layer)]
    ks[0] = ks[-1] = context
    return tuple(ks)


def _rule_readme(n_layer: int, context: int) -> tuple[int, ...]:
    """The README's sentence: k_l = 4 * 2^l, then the first and the last layer global."""
    ks = [4 * 2**layer for layer in range(n_layer)]
    ks[0] = ks[-1] = context
    return tuple(ks)


# Named rules: (n_layer, context) -> windows; the context stands for "global".
WINDOW_RULES: dict[str, Callable[[int, int], tuple[int, ...]]] = {
    "seeds": _rule_seeds,
    "head": _rule_head,
    "readme": _rule_readme,
}


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_pool_options(rescale: object, eps_compat: object, block: object) -> None:
    if not (_is_int(rescale) or isinstance(rescale, float)) or not 0 < rescale <= MAX_RESCALE:
        raise ValueError(
            f"rescale must be a number in (0, {MAX_RESCALE:g}], got {rescale!r}: logits lie in "
            f"(-rescale, rescale) and the weights e^(logit - rescale) must stay normal fp32 numbers"
        )
    if not isinstance(eps_compat, bool):
        raise ValueError(f"eps_compat must be true or false, got {eps_compat!r}")
    if not _is_int(block) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")


@dataclass(frozen=True)
class AdditiveOptions:
    """Options of ``additive`` (global pooling in every layer).

    rescale: s in logit = s norm(x).norm(w) / h. Default 15, the value of the published
        global run (perplexity 71.0); b587c27's config default was 7 (HEAD's is 15).
    eps_compat: add the reference's 1e-5 to the pooling denominator (b587c27 behaviour;
        it shrinks outputs whose window weights are small). Off: the exact weighted mean.
    block: block length of the two-level prefix scan for global sums; rounding only.
    """

    rescale: float = 15.0
    eps_compat: bool = False
    block: int = 256

    def __post_init__(self) -> None:
        _check_pool_options(self.rescale, self.eps_compat, self.block)
        object.__setattr__(self, "rescale", float(self.rescale))

    def pool_spec(self) -> PoolSpec:
        return PoolSpec(self.rescale, self.eps_compat, self.block)


@dataclass(frozen=True)
class WindowedOptions:
    """Options of ``windowed`` (per-layer windows of k tokens including the current one).

    windows: one window per layer, e.g. [4, 8, 16, 32, 64, 2048]; a window >= the model
        context is global. Or a rule by name: "seeds" (default; b587c27, the 50.0 run:
        k_l = 4 * 2^l, last layer global), "head" (HEAD 77d1578: k_l = 2 * 2^l, first and
        last layer global), "readme" (the README's text: k_l = 4 * 2^l, first and last global).
    rescale: default 10, the value of the published windowed run (b587c27's default was 7;
        the notebook notes 15 trains unstably with windows).
    eps_compat, block: as for ``additive``.
    """

    windows: str | tuple[int, ...] = "seeds"
    rescale: float = 10.0
    eps_compat: bool = False
    block: int = 256

    def __post_init__(self) -> None:
        _check_pool_options(self.rescale, self.eps_compat, self.block)
        object.__setattr__(self, "rescale", float(self.rescale))
        w = self.windows
        if isinstance(w, str):
            if w not in WINDOW_RULES:
                raise ValueError(f"unknown window rule {w!r}; rules: {sorted(WINDOW_RULES)}, or a list of ints")
            return
        if not isinstance(w, (list, tuple)) or not w or not all(_is_int(k) and k >= 1 for k in w):
            raise ValueError(f"windows must be a rule name or a non-empty list of positive integers, got {w!r}")
        object.__setattr__(self, "windows", tuple(w))

    def pool_spec(self) -> PoolSpec:
        return PoolSpec(self.rescale, self.eps_compat, self.block)

    def resolve(self, n_layer: int, context: int) -> tuple[int, ...]:
        """The window of every layer; raises ValueError when an explicit list has the wrong length."""
        if isinstance(self.windows, str):
            return WINDOW_RULES[self.windows](n_layer, context)
        if len(self.windows) != n_layer:
            raise ValueError(
                f"windows lists {len(self.windows)} windows {list(self.windows)} for a model of "
                f"{n_layer} layers; give exactly one per layer"
            )
        return self.windows


Opts = TypeVar("Opts", AdditiveOptions, WindowedOptions)


def options_of(config: ModelConfig, cls: type[Opts]) -> Opts:
    """The config's options of type ``cls``, or its defaults when it carries none."""
    if config.options is None:
        return cls()
    if not isinstance(config.options, cls):
        raise ValueError(f"config.options is a {type(config.options).__name__}; expected {cls.__name__}")
    return config.options


def additive_windows(config: ModelConfig) -> tuple[int, ...]:
    return (config.context,) * config.n_layer  # a window of the whole context is global


def windowed_windows(config: ModelConfig) -> tuple[int, ...]:
    return options_of(config, WindowedOptions).resolve(config.n_layer, config.context)


def state_elements(config: ModelConfig, window: int, T: int) -> int:
    """Decode-state elements of one layer for one sequence after T tokens (two poolings)."""
    per_entry = config.n_head * (config.head_dim + 1)  # [e x^ (h), e (1)] per head
    return 2 * per_entry * (window if window < min(T, config.context) else 1)


def additive_state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return state_elements(config, additive_windows(config)[layer_idx], T)


def windowed_state_size(config: ModelConfig, layer_idx: int, T: int) -> int:
    return state_elements(config, windowed_windows(config)[layer_idx], T)


def flops_per_token(config: ModelConfig, layer_idx: int, T: int) -> float:
    d = config.d_model
    # QKV projection 2*d*3d; per pooling about 12d (normalise 5d, logit 2d, weighting d,
    # window sums 3d, divide d), whatever the window; two elementwise products 2d.
    return 6.0 * d * d + 2 * 12.0 * d + 2.0 * d


@hookimpl
def attnbench_register_variants(register) -> None:
    register(
        Variant(
            name="additive",
            build_mixer=f"{MODEL}:build_additive_mixer",
            description="Causal additive attention (Fastformer, mtanghu): global cumulative pooling",
            options=AdditiveOptions,
            build_model=f"{MODEL}:build_additive_model",
            decode="recurrent",
            state_size=additive_state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
    register(
        Variant(
            name="windowed",
            build_mixer=f"{MODEL}:build_windowed_mixer",
            description="Windowed additive attention (Fastformer, mtanghu): per-layer windows of k tokens",
            options=WindowedOptions,
            build_model=f"{MODEL}:build_windowed_model",
            decode="window",
            state_size=windowed_state_size,
            flops_per_token=flops_per_token,
            version="1",
            attention_maps=f"{MODEL}:attention_maps",
        )
    )
