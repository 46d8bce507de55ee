"""FLOP counts of the shared chunked scans (no torch: a plugin's registration reads them)."""

from __future__ import annotations


def chunked_flops_per_token(
    d_model: int,
    n_head: int,
    head_dim: int,
    chunk: int,
    T: int,
    n_features: int | None = None,
    from_empty: bool = False,
) -> float:
    """Analytic forward FLOPs per token of a chunked linear-attention layer at context T:
    QKV and output projections 8 d^2; per head (F = n_features, default h) c x c scores
    2 c F, scores @ [v, 1] 2 c (h+1), chunk summary phi(k)^T [v, 1] and carried-state read
    2 * 2 F (h+1) (element-wise feature maps, exponentials and logs not counted).
    from_empty: the layer trains from no state (``linear_attention``'s state None), so with T
    <= chunk there is no summary or state read."""
    c, h = min(chunk, max(T, 1)), head_dim
    f = n_features or h
    state = 0.0 if from_empty and chunk >= T else 4.0 * f * (h + 1)
    return 8.0 * d_model * d_model + n_head * (2.0 * c * f + 2.0 * c * (h + 1) + state)
