"""Torch-free settings of causal additive pooling (``attnbench.plugins.kernels.additive``).

The constants and ``PoolSpec`` live here so that the variant's registration module
(``attnbench.plugins.attention.additive``) can validate options without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NORM_EPS = 1e-5  # added to the unbiased std (not inside a sqrt), as in the reference
COMPAT_EPS = 1e-5  # the reference's eps in the pooling denominator (eps_compat only)
MAX_RESCALE = 40.0  # e^{a - s} >= e^{-2s} must stay a normal fp32 number (> e^{-87})


@dataclass(frozen=True)
class PoolSpec:
    """Settings shared by both poolings of a layer."""

    rescale: float  # s: logits are bounded by |a| < s
    eps_compat: bool  # add the reference's 1e-5 to the (unshifted) denominator
    block: int  # block length of the two-level prefix scan of global sums (rounding only)

    def eps_shifted(self) -> float:
        """The compat eps in the units of the shifted weights e^{a - s}: 1e-5 * e^{-s}."""
        return COMPAT_EPS * math.exp(-self.rescale) if self.eps_compat else 0.0
