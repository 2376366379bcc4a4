"""The one text size of every chart: ``FONT`` points for labels, ticks, legends and the numbers written
in cells, ``TITLE`` for titles, at ``DPI`` dots per inch (9 pt is 12.5 px, 10 pt 13.9 px: at least
``MIN_PX`` pixels, legible where a report shows a chart at its own size).

``uniform(fig)`` sets them on a matplotlib figure just before it is drawn (``viz.charts.figure_image``,
``viz.curves``), so a chart written with other sizes, or with matplotlib's defaults, still comes out
in these; the charts of every room go through it.
"""

from __future__ import annotations

from typing import Any

from ..base.optional import require

DPI = 100  # dots per inch of every chart
FONT = 9  # points: axis labels, ticks, legends, colour bars, numbers in cells
TITLE = 10  # points: titles
MIN_PX = 9  # the smallest text a chart may hold, in pixels


def pixels(points: float, dpi: float = DPI) -> float:
    """``points`` of text in pixels at ``dpi`` (a point is 1/72 inch).

    Args:
        points: a font size in points.
        dpi: dots per inch of the figure.

    Returns:
        The size in pixels.
    """
    return points * dpi / 72


def uniform(fig: Any) -> None:
    """Set every text of the matplotlib figure ``fig`` to ``FONT`` points, its titles to ``TITLE``.

    Args:
        fig: a matplotlib ``Figure``, before it is drawn.
    """
    text_class: Any = require("matplotlib.text").Text
    titles = {id(getattr(fig, "_suptitle", None))}
    for ax in fig.axes:
        titles |= {id(getattr(ax, name, None)) for name in ("title", "_left_title", "_right_title")}
        ax.tick_params(labelsize=FONT)  # ticks made at draw time too
        ax.xaxis.get_offset_text().set_fontsize(FONT)
        ax.yaxis.get_offset_text().set_fontsize(FONT)
    for text in fig.findobj(text_class):
        text.set_fontsize(TITLE if id(text) in titles else FONT)
