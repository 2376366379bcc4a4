"""Pictures of statistics over training steps, as PNG bytes: curves per layer, a layers x steps heatmap, a sparkline.

They take plain numbers (``{layer: (steps, values)}``), so any time series draws: a training
report (``hookscope.train.page``) and a ``History``'s notebook view use them. matplotlib is
imported inside the functions, figures are drawn on the Agg canvas (never pyplot), NaN is a gap.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..base.optional import require
from ..base.words import shorten
from .fonts import DPI, FONT, TITLE, uniform

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ZERO = "#4c9be8"  # an exact zero in the heatmap: outside magma's black-to-yellow, so never a tiny value
Series = Mapping[str, tuple[Sequence[int], Sequence[float]]]  # layer -> (steps, values)


def curves_png(series: Series, *, title: str, log: bool = False, band: tuple[float, float] | None = None,
               marks: Sequence[tuple[str, int]] = (), width: float = 6.4) -> bytes:  # fmt: skip
    """One line per layer over the steps (colours follow the layers' order), ``band`` shaded as healthy,
    ``marks`` ``(layer, step)`` drawn as red crosses; a log axis leaves out negative values and draws
    zeros (a gradient that is exactly zero) at zero, on a linear stretch below the smallest value."""
    fig = _figure(width, 3.2)
    ax = fig.add_subplot()
    cmap = require("matplotlib").colormaps["viridis"]
    names = list(series)
    for i, name in enumerate(names):
        steps, values = series[name]
        shown = [v if math.isfinite(v) and (v >= 0 or not log) else math.nan for v in values]
        ax.plot(steps, shown, color=cmap(i / max(len(names) - 1, 1)), linewidth=1.4, label=shorten(name))
        for layer, step in marks:
            if layer == name and step in steps:
                y = next((v for v in shown if math.isfinite(v)), 1.0)
                ax.plot([step], [y], "x", color="#d62728", markersize=10, markeredgewidth=2.5)
    if log:
        _log_axis(ax, [v for _, vs in series.values() for v in vs])
    if band is not None:
        ax.axhspan(band[0], band[1], color="#2ca02c", alpha=0.10, linewidth=0)
    ax.set_title(title, fontsize=TITLE, loc="left")
    ax.set_xlabel("step", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.grid(alpha=0.25, linewidth=0.6)
    if 1 < len(names) <= 12:
        ax.legend(fontsize=FONT, ncol=2 if len(names) > 6 else 1, frameon=False, loc="best")
    return _png(fig)


def heatmap_png(names: Sequence[str], steps: Sequence[int], values: Sequence[Sequence[float]], *, title: str,
                mark: tuple[str, int] | None = None) -> bytes:  # fmt: skip
    """``values`` (layers x steps) as colours, log10; an exact zero in its own colour (``ZERO``), NaN and
    infinities blank; ``mark`` ``(layer, step)`` boxed."""
    numpy = require("numpy")
    colors: Any = require("matplotlib.colors")
    grid = numpy.array([[math.log10(v) if math.isfinite(v) and v > 0 else math.nan for v in row] for row in values])
    zeros = numpy.array([[1.0 if v == 0 else math.nan for v in row] for row in values])
    height = min(max(2.0, 0.2 * len(names) + 1.2), 14.0)
    fig = _figure(max(6.4, min(12.0, 0.06 * len(steps) + 4)), height)
    ax = fig.add_subplot()
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="magma")
    if not numpy.isnan(zeros).all():  # log10 has no zero: drawn apart, said in the legend
        ax.imshow(zeros, aspect="auto", interpolation="nearest", cmap=colors.ListedColormap([ZERO]))
        patches: Any = require("matplotlib.patches")
        ax.legend(handles=[patches.Patch(color=ZERO, label="exactly 0")], loc="upper left", bbox_to_anchor=(0, -0.12),
                  fontsize=FONT, frameon=False)  # fmt: skip
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02).set_label("log10", fontsize=FONT)
    ax.set_yticks(range(len(names)), [shorten(n) for n in names], fontsize=FONT)
    ticks = regular_ticks(steps)
    ax.set_xticks(ticks, [str(steps[t]) for t in ticks], fontsize=FONT)
    ax.set_xlabel("step", fontsize=FONT)
    ax.set_title(title, fontsize=TITLE, loc="left")
    if mark is not None and mark[0] in names and mark[1] in steps:
        y, x = list(names).index(mark[0]), list(steps).index(mark[1])
        boxes: Any = require("matplotlib.patches")
        ax.add_patch(boxes.Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="#00e5ff", linewidth=2.5))
    return _png(fig)


def regular_ticks(steps: Sequence[int], most: int = 7) -> list[int]:
    """Indices into ``steps`` whose steps are the multiples of one round stride (1, 2 or 5 x 10^k, or a
    multiple of the logging interval): 0, 50, 100, ... rather than 0, 60, 120, 170."""
    if len(steps) < 2:
        return list(range(len(steps)))
    span = steps[-1] - steps[0]
    strides = sorted({m * 10**k for k in range(12) for m in (1, 2, 5)})
    for stride in (s for s in strides if span / s <= most - 1):
        found = [i for i, s in enumerate(steps) if s % stride == 0]
        if len(found) >= 2:
            return found
    return [0, len(steps) - 1]


def sparkline_png(values: Sequence[float], *, log: bool = False, width: float = 1.6, height: float = 0.4) -> bytes:
    """A small line of ``values`` with no axes, for a table cell."""
    fig = _figure(width, height, layout=None)
    ax = fig.add_axes((0, 0, 1, 1))
    shown = [v if math.isfinite(v) and (v >= 0 or not log) else math.nan for v in values]
    ax.plot(range(len(shown)), shown, color="#4f46e5", linewidth=1.2)
    if log:
        _log_axis(ax, shown)
    ax.axis("off")
    return _png(fig)


def log_scale(values: Sequence[float]) -> tuple[str, dict[str, float]] | None:
    """The y scale of a log chart of ``values``: ``log``, or ``symlog`` (linear below the smallest
    positive value) when some are exactly zero, so that a zero gradient is drawn at zero, not left out."""
    positive = [v for v in values if math.isfinite(v) and v > 0]
    if not positive:
        return None
    if any(v == 0 for v in values):
        return "symlog", {"linthresh": min(positive)}
    return "log", {}


def _log_axis(ax: Any, values: Sequence[float]) -> None:
    scale = log_scale(values)
    if scale is not None:
        ax.set_yscale(scale[0], **scale[1])


def _figure(width: float, height: float, layout: str | None = "constrained") -> Figure:
    figure: Any = require("matplotlib.figure")
    fig: Figure = figure.Figure(figsize=(width, height), dpi=DPI, layout=layout)
    return fig


def _png(fig: Figure) -> bytes:
    agg: Any = require("matplotlib.backends.backend_agg")
    buffer = io.BytesIO()
    uniform(fig)
    agg.FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()
