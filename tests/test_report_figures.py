"""The report's multi-panel training figures stay legible with many variants in one suite
(smoke trains 14): one legend below the panels, the figure taller by its rows, instead of a
legend with every variant in each panel, which squeezed the axes to nothing (matplotlib's
"constrained_layout not applied" warning, printed by `attnbench run smoke`). 30 variants here:
where the squeeze begins depends on the fonts found (14 warned in a shell, not under pytest)."""

from __future__ import annotations

import io
import warnings

import pandas as pd
from PIL import Image

from attnbench.report.figures import equal_budget, loss_curves, make_palette

VARIANTS = [f"variant-{i:02d}" for i in range(30)]


def _curves() -> pd.DataFrame:
    rows = []
    for v, variant in enumerate(VARIANTS):
        for step in (10, 20, 30):
            for split in ("train", "held-out"):
                loss = 4.0 - 0.02 * step - 0.01 * v + (0.05 if split == "held-out" else 0.0)
                rows.append(
                    dict(
                        variant=variant,
                        seed=0,
                        step=step,
                        tokens=512 * step,
                        elapsed_s=0.1 * step,
                        flops=1e9 * step,
                        split=split,
                        loss=loss,
                    )
                )
    return pd.DataFrame(rows)


def test_many_variants_share_one_legend_below_the_panels_without_a_layout_warning():
    curves, palette, labels = _curves(), make_palette(VARIANTS), {v: v for v in VARIANTS}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the squeezed layout warned (UserWarning) before
        figures = [
            loss_curves(curves, palette, labels, "loss curves", "loss"),
            equal_budget(curves, palette, labels, "equal budget", "budget"),
        ]
    for figure, panels in zip(figures, (2, 3), strict=True):
        assert figure is not None
        width, height = Image.open(io.BytesIO(figure.png)).size
        assert height > 0.3 * width / panels  # each panel keeps a usable height beside its width
