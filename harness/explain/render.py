"""Attention maps as files: one PNG heatmap per layer (its heads side by side, tokens on
the axes), an HTML page showing every layer, and the numbers as JSON. A layer with negative
weights is drawn on a diverging colour scale centred at 0 (``colour_scale``)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnbench.errors import InspectError
from attnbench.explain.maps import Inspection, LayerMap


def check_out_dir(out: Path) -> None:
    """Refuse, before any work, an output folder that cannot be made: it, or a folder above
    it, is an existing file."""
    for path in (out, *out.parents):
        if path.exists():
            if path.is_dir():
                return
            if path == out:
                raise InspectError(
                    f"--out {out} is an existing file, not a folder; give --out a folder path "
                    "(it is created if missing), or move the file"
                )
            raise InspectError(
                f"--out {out}: {path} is an existing file, so no folder can be made under it; "
                "give --out a folder path elsewhere, or move the file"
            )


@dataclass(frozen=True)
class Scale:
    """A heatmap's colour scale."""

    cmap: str
    vmin: float
    vmax: float | None = None  # None: the data's maximum
    center: float | None = None  # a diverging map's midpoint

    @property
    def diverging(self) -> bool:
        return self.center is not None


def colour_scale(m: LayerMap) -> Scale:
    """The heatmap's colour scale for layer map ``m``: viridis from 0 where every weight is
    non-negative (softmax rows, importances); where any is negative (Differential attention's
    difference of two softmaxes), a diverging map centred at 0, symmetric about it and shared by
    the layer's heads, so a negative weight never reads as zero."""
    finite = m.weights[np.isfinite(m.weights)]
    if not finite.size or float(finite.min()) >= 0.0:
        return Scale("viridis", 0.0)
    bound = float(np.abs(finite).max())
    return Scale("RdBu_r", -bound, bound, 0.0)


def _figure(m: LayerMap, tokens: list[str]):
    import seaborn as sns

    from attnbench.plotting import plt  # the Agg backend, set in one place

    H, T = m.weights.shape[0], len(tokens)
    scale = colour_scale(m)
    font = max(4.0, min(9.0, 600.0 / T))  # labels stay legible up to T ~ 128
    if m.kind == "pairwise":
        side = max(4.0, 0.11 * T + 1.5)
        fig, axes = plt.subplots(1, H, figsize=(side * H, side), squeeze=False)
        for h, ax in enumerate(axes[0]):
            sns.heatmap(
                m.weights[h],
                ax=ax,
                cmap=scale.cmap,
                vmin=scale.vmin,
                vmax=scale.vmax,
                center=scale.center,
                square=True,
                xticklabels=tokens,
                yticklabels=tokens,
                cbar_kws={"shrink": 0.6},
            )
            ax.set(title=f"layer {m.layer} head {h}", xlabel="key (attended to)", ylabel="query")
            ax.tick_params(labelsize=font)
    else:
        fig, ax = plt.subplots(figsize=(max(6.0, 0.12 * T + 2), 1.0 + 0.5 * H))
        sns.heatmap(
            m.weights,
            ax=ax,
            cmap=scale.cmap,
            vmin=scale.vmin,
            vmax=scale.vmax,
            center=scale.center,
            xticklabels=tokens,
            yticklabels=[f"head {h}" for h in range(H)],
            cbar_kws={"shrink": 0.8},
        )
        ax.set(title=f"layer {m.layer}: per-token importance", xlabel="token")
        ax.tick_params(labelsize=font)
    fig.tight_layout()
    return fig


def write_pngs(ins: Inspection, out: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for m in ins.layers:
        fig = _figure(m, ins.tokens)
        path = out / f"layer{m.layer}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def write_html(ins: Inspection, pngs: list[Path], out: Path) -> Path:
    text = html.escape("".join(" " if t == "␣" else t for t in ins.tokens))
    parts = [
        f"<h1>Attention maps: {html.escape(ins.variant)}</h1>",
        f"<p>checkpoint <code>{html.escape(ins.checkpoint.path)}</code> (cell "
        f"{html.escape(str(ins.checkpoint.cell_key))}, step {ins.checkpoint.step}); "
        f"{len(ins.tokens)} byte tokens: <code>{text}</code></p>",
        "<p>Pairwise maps: row = query position, column = key position, each row's weights "
        "over keys j &le; i. Importance maps: one weight per token and head.</p>",
    ]
    for m, png in zip(ins.layers, pngs, strict=True):
        note = (
            f"<p>Some weights are negative (down to {float(np.nanmin(m.weights)):.3g}): a diverging colour scale "
            "centred at 0, blue below it and red above.</p>"
            if colour_scale(m).diverging
            else ""
        )
        parts.append(
            f"<h2>Layer {m.layer} ({m.kind}, {m.weights.shape[0]} heads)</h2>{note}"
            f'<img src="{png.name}" style="max-width:100%">'
        )
    path = out / "index.html"
    path.write_text(
        "<!doctype html><meta charset='utf-8'><title>attnbench inspect</title>"
        "<body style='font-family:sans-serif'>" + "\n".join(parts) + "</body>"
    )
    return path


def write_json(ins: Inspection, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "maps.json"
    path.write_text(json.dumps(ins.to_json()))
    return path
