"""The faces of the text page (``TextReport``): its HTML page, its table and its notebook view.

``render_text_html`` draws the page from ``templates/tokens.html.j2`` (autoescaped: every token is
text, never markup): a head grid is never shown narrower than its labels allow (``least_width``),
a table's cells are shaded by their share of the table's largest value (``table_max``).
``text_table`` is ``report.table()``: a row per attention layer, the mean attention of each token
to itself per sequence; ``text_report_html`` is the notebook view: the notes, the first
``MAX_SHOWN`` attention layers and the first layer's heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..base.display import html_of, section_of, shows_as, table_of
from ..base.optional import require
from ..base.words import columns
from ..report.html import draws_page, environment, write_page
from ..viz.fragments import Safe, figure, more, note, table, view
from .grid import FONT
from .text_content import MeanView, TextReport

TEMPLATE = "tokens.html.j2"  # beside report.html.j2
MAX_SHOWN = 24  # attention layers listed in the notebook view
READABLE = 9  # CSS pixels: the smallest a head grid's labels are shown, at any screen width


@draws_page(TextReport)
def render_text_html(report: TextReport) -> str:
    """The text report as one self-contained page (``templates/tokens.html.j2``, autoescaped)."""
    markupsafe: Any = require("markupsafe")
    attributions = [(title, markupsafe.Markup(fragment)) for title, fragment in report.attributions]
    found = None if report.linear is None else section_of(report.linear)  # its own (anchor, title, view)
    linear = None if found is None else (found[0], found[1], markupsafe.Markup(found[2]))
    env = environment()
    env.globals.update(shade=_shade, table_max=table_max, least_width=least_width)
    html: str = env.get_template(TEMPLATE).render(report=report, attributions=attributions, linear=linear)
    return html


def write_text_report(report: TextReport, out: str | Path, *, force: bool = False) -> Path:
    """Write ``out/index.html`` (staged next to ``out``, moved into place when complete) and return its path."""
    return write_page(lambda: render_text_html(report), out, force=force)


def text_table(report: TextReport) -> str:
    """A row per attention layer drawn: its heads and, per sequence, the mean attention of a token to itself;
    for a model of linear attention only, the line that says so and its ``LinearAttention`` table."""
    if report.linear is not None:
        return "\n".join([_no_softmax_line(report), table_of(report.linear)])
    header = ["layer", "heads", *(f"self, seq {b}" for b in range(len(report.sentences)))]
    rows = [header] + [[layer.name, str(layer.heads), *(f"{_self_attention(m):.4f}" for m in layer.means)]
                       for layer in report.attention]  # fmt: skip
    return "\n".join(columns(rows, right=range(1, len(header))))


def _no_softmax_line(report: TextReport) -> str:
    return f"{report.model} has no softmax attention: its layers are linear attention (see below)"


def _self_attention(mean: MeanView) -> float:
    """The mean of the diagonal of a sequence's head-averaged attention: how much a token looks at itself."""
    return sum(mean.rows[i][i] for i in range(len(mean.rows))) / max(len(mean.rows), 1)


@shows_as(TextReport, table=text_table)
def text_report_html(report: TextReport) -> str:
    """The notebook view: the page's notes, a row per attention layer, and the first layer's heads."""
    body = note(f"{report.model}, {report.parameters:,} parameters; {len(report.sentences)} sequence(s) drawn")
    for line in (*report.notes, *report.remarks):
        body += note(line)
    rows = [(layer.name, layer.heads) for layer in report.attention[:MAX_SHOWN]]
    body += table(("attention layer", "heads"), rows, numeric=(1,)) + more(len(rows), len(report.attention), "layers")
    if report.linear is not None:
        body += Safe(html_of(report.linear) or "")  # the remarks above say why it stands for the attention
    if report.attention and report.attention[0].grids:
        first = report.attention[0]
        grid = figure(first.grids[0], f"{first.name}: every head and their mean, sequence 0")
        body += Safe('<div class="hs-scroll">') + grid + Safe("</div>")  # natural size: labels stay readable
    return view(body, title=report.title)


def _shade(value: float, top: float) -> str:
    """The CSS background of a cell: the accent colour at ``value / top`` strength."""
    strength = 0.0 if top <= 0 else max(0.0, min(1.0, value / top))
    return f"background: color-mix(in srgb, var(--accent) {100 * strength:.0f}%, transparent)"


def least_width(picture: bytes) -> int:
    """The narrowest a head grid (PNG bytes) is shown, in CSS pixels: its FONT-pixel labels stay READABLE."""
    width = int.from_bytes(picture[16:20], "big")  # the PNG's IHDR chunk: width, then height
    return math.ceil(width * READABLE / FONT)


def table_max(rows: Sequence[Sequence[float]]) -> float:
    """The largest value of a table (0 for an empty one)."""
    return max((max(row) for row in rows if row), default=0.0)
