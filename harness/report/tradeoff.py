"""Quality against cost: each variant one point per experiment (its test metric, mean over
seeds with the 95% interval as bars) against its training-step time and its state size,
with the Pareto front (no other variant is both cheaper and better) drawn through it. Variants
that have not learned (not beyond their null level) are grey and take no part in the front.
Without a timed train step (no speed experiment in the suite) there is no time panel, and the
caption says so. Labels never overlap: variants sharing a point share one label, and a label that
would cover another moves up, tied to its point by a line. The figure comes as PNG and as SVG whose
labels stay text (``tradeoff-label-N``), so a browser can show and measure them."""

from __future__ import annotations

import io
import re
import textwrap

import matplotlib
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator
from matplotlib.transforms import Bbox

from attnbench.plotting import png as _png
from attnbench.report.document import Figure
from attnbench.report.figures import Palette
from attnbench.report.values import bytes_text, is_number, seconds_text

UNLEARNED = (0.78, 0.78, 0.78)  # grey: a variant not beyond its null level
NO_SPEED = "No timing"  # the caption's words where no variant was timed
LABEL_ID = "tradeoff-label"  # a point label's id in the SVG: tradeoff-label-0, -1, ...
_LABEL_GAP = 3.0  # points kept clear between two labels (a browser's text is a little wider than matplotlib's)


def pareto_front(points: list[tuple[float, float]], higher_is_better: bool) -> list[int]:
    """Indices of the points no other point dominates (cost no larger, quality no worse, one
    strictly), ordered by cost."""

    def better(a: float, b: float) -> bool:
        return a > b if higher_is_better else a < b

    front = []
    for i, (c, q) in enumerate(points):
        dominated = any(
            (c2 <= c and not better(q, q2) and (c2 < c or better(q2, q))) for j, (c2, q2) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def _panel(ax, sub: pd.DataFrame, cost: str, palette: Palette) -> None:
    """One experiment against one cost: points with interval bars, labelled, and the front."""
    metric = sub["metric"].iloc[0]
    unlearned = sub["unlearned"] if "unlearned" in sub else [False] * len(sub)
    pts = [
        (float(x), float(y), v, lo, hi, bool(off))
        for x, y, v, lo, hi, off in zip(
            sub[cost], sub["value_mean"], sub["variant"], sub["value_lo"], sub["value_hi"], unlearned, strict=True
        )
        if is_number(x) and x > 0 and is_number(y)
    ]
    learned = [i for i, p in enumerate(pts) if not p[5]]
    front = [learned[j] for j in pareto_front([(pts[i][0], pts[i][1]) for i in learned], metric == "accuracy")]
    if len(front) > 1:
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="#999", lw=1, zorder=1)
    for i, (x, y, v, lo, hi, off) in enumerate(pts):
        err = [[y - lo], [hi - y]] if is_number(lo) and is_number(hi) else None
        ax.errorbar(
            [x],
            [y],
            yerr=err,
            fmt="o",
            ms=6 if i in front else 4.5,
            capsize=2,
            zorder=2,
            color=UNLEARNED if off else palette.get(v, (0.3, 0.3, 0.3)),
            mec="black" if i in front else "none",
            mew=0.8,
        )
    shared: dict[tuple[float, float, bool], list[str]] = {}  # variants at one point share its label
    for x, y, v, _lo, _hi, off in pts:
        shared.setdefault((x, y, off), []).append(v)
    for (x, y, off), names in shared.items():
        label = textwrap.fill(f"{', '.join(names)} (not learned)" if off else ", ".join(names), 28)
        ax.annotate(label, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points", color="#888" if off else None)
    ax.set_xscale("log")
    ax.tick_params(labelsize=7)
    if pts:
        ax.margins(x=0.3)
    # labelled ticks at powers of 2 (bytes) or at 1, 2, 5 x 10^k (seconds), at most about six
    state = cost == "state_bytes"
    lo, hi = ax.get_xlim()
    subs = (1.0, 2.0, 5.0) if state or hi / lo > 4 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)  # >= 2 labels
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=4) if state else LogLocator(10, subs, numticks=6))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: (bytes_text if state else seconds_text)(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if metric == "accuracy":  # an interval of a mean may pass 1: the axis shows what accuracy can be
        ax.set_ylim(max(-0.02, ax.get_ylim()[0]), 1.02)


def _timed(rows: pd.DataFrame) -> bool:
    return "step_time_s" in rows and any(is_number(t) and t > 0 for t in rows["step_time_s"])


def draw_tradeoff(rows: pd.DataFrame, palette: Palette, T: int | None = None) -> MplFigure | None:
    """The picture, its labels placed: ``rows``: experiment, variant, metric, value_mean/lo/hi,
    step_time_s, state_bytes (unlearned: optional); ``T`` the length the step times were measured at."""
    experiments = list(dict.fromkeys(rows["experiment"]))
    if not experiments:
        return None
    costs = (("step_time_s", f"train-step time at T={T}" if T else "train-step time"), ("state_bytes", "decode state"))
    if not _timed(rows):  # an empty panel would say nothing: the caption says why there is none
        costs = costs[1:]
    fig = MplFigure(figsize=(0.4 + 2.5 * len(costs), 0.3 + 2.0 * len(experiments)), layout="constrained")
    axes = fig.subplots(len(experiments), len(costs), squeeze=False)
    for r, exp in enumerate(experiments):
        sub = rows[rows["experiment"] == exp]
        metric = sub["metric"].iloc[0]
        for c, (cost, label) in enumerate(costs):
            ax = axes[r][c]
            _panel(ax, sub, cost, palette)
            ax.set_xlabel(label + ", log", fontsize=8)
            if c == 0:
                ax.set_ylabel(
                    f"{exp}: test {metric}\n({'higher' if metric == 'accuracy' else 'lower'} is better)", fontsize=8
                )
    front = [Line2D([], [], ls="--", color="#999", marker="o", mec="black", mfc="white", label="Pareto front")]
    fig.legend(handles=front, loc="outside upper right", fontsize=7, frameon=False)
    _place_labels(fig)
    return fig


def _place_labels(fig: MplFigure) -> None:
    """Lay the axes out for their own decorations and keep them there; then, by the renderer's
    extents of the labels' text, move each label (lowest first) into its panel across, and by the
    least vertical shift that keeps it a gap clear of every point and every label placed before it,
    inside its panel where it can be; a moved label gets a line to its point. Each label gets its SVG id."""
    labels = [(ax, t) for ax in fig.axes for t in ax.texts if isinstance(t, Annotation)]
    for _ax, label in labels:
        label.set_in_layout(False)
    fig.draw_without_rendering()  # the constrained layout places the axes ...
    fig.set_layout_engine("none")  # ... and they stay there while labels move
    renderer = FigureCanvasAgg(fig).get_renderer()  # the text extents the PNG is drawn with
    pt = fig.dpi / 72  # display pixels per point
    placed = [_around(ax, t.xy, 2 * pt) for ax, t in labels]  # no label covers a point
    labels.sort(key=lambda pair: pair[1].get_window_extent(renderer).y0)
    for n, (ax, label) in enumerate(labels):
        panel = ax.get_window_extent(renderer)
        box = label.get_window_extent(renderer).padded(_LABEL_GAP * pt / 2)
        across = _across(box, panel, label.xyann[0] * pt)
        up = _free_shift(box.translated(across, 0), placed, panel)
        placed.append(box.translated(across, up))
        if across or up:
            label = _moved(ax, label, across / pt, up / pt)
        label.set_gid(f"{LABEL_ID}-{n}")
        label.set_in_layout(True)  # the saved picture's tight bounding box includes it


def _around(ax: Axes, xy: tuple[float, float], half: float) -> Bbox:
    """A square of ``half`` pixels either side of the data point ``xy``."""
    x, y = ax.transData.transform(xy)
    return Bbox.from_extents(x - half, y - half, x + half, y + half)


def _across(box: Bbox, panel: Bbox, offset: float) -> float:
    """The horizontal shift that keeps ``box`` (``offset`` right of its point) inside ``panel``:
    none, to the point's left, or against the panel's right edge (its left, if wider)."""
    if box.x1 <= panel.x1:
        return 0.0
    left = -(box.width + 2 * offset)
    if box.x0 + left >= panel.x0:
        return left
    return max(panel.x1 - box.x1, panel.x0 - box.x0)


def _free_shift(box: Bbox, placed: list[Bbox], panel: Bbox) -> float:
    """The vertical shift of least size that clears ``box`` of every ``placed`` box, one inside
    ``panel`` where there is one (above the highest box always clears)."""
    shifts = sorted({0.0, *(p.y1 - box.y0 for p in placed), *(p.y0 - box.y1 for p in placed)}, key=abs)
    free = [s for s in shifts if not any(_overlap(box.translated(0, s), p) for p in placed)]
    inside = [s for s in free if panel.y0 <= box.y0 + s and box.y1 + s <= panel.y1]
    return (inside or free)[0]


def _overlap(a: Bbox, b: Bbox) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _moved(ax: Axes, label: Annotation, across: float, up: float) -> Annotation:
    """``label`` again, moved by (``across``, ``up``) points, with a thin line from its point."""
    dx, dy = label.xyann
    moved = ax.annotate(
        label.get_text(),
        label.xy,
        xytext=(dx + across, dy + up),
        textcoords="offset points",
        fontsize=label.get_fontsize(),
        color=label.get_color(),
        arrowprops={"arrowstyle": "-", "color": "#aaa", "lw": 0.6, "shrinkA": 0, "shrinkB": 2},
    )
    label.remove()
    return moved


def _svg(fig: MplFigure, slug: str, title: str) -> str:
    """The figure as an SVG element to inline in the page: text kept as text, no XML prolog and no
    metadata, ids stable from run to run and salted by ``slug`` (unique within a report)."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": slug}):
        meta = {"Title": title, "Date": None, "Creator": None, "Format": None, "Type": None}
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata=meta)
    text = buf.getvalue()
    return re.sub(r"\s*<metadata>.*</metadata>", "", text[text.index("<svg") :], flags=re.S)


def tradeoff_figure(rows: pd.DataFrame, palette: Palette, T: int | None = None) -> Figure | None:
    """The picture as a report figure, PNG and SVG; ``rows`` and ``T`` as ``draw_tradeoff``'s."""
    fig = draw_tradeoff(rows, palette, T)
    if fig is None:
        return None
    cost = (
        "cost: train-step time at the longest length timed for every variant, and the fp32 decode state at "
        "the training length"
        if _timed(rows)
        else f"cost: the fp32 decode state at the training length. {NO_SPEED}: no speed experiment in this "
        "suite (none timed a train step), so there is no train-step time panel"
    )
    title = "Quality against cost"
    return Figure(
        "tradeoff",
        title,
        _png(fig),
        "Each point: a variant at its chosen grid point, test metric as the mean over seeds with its 95% "
        f"interval; {cost}. Dashed through outlined points: the Pareto front. Grey, "
        "marked 'not learned': variants whose test metric is not beyond its null level (no front).",
        svg=_svg(fig, "tradeoff", title),
    )
