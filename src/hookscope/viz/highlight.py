"""Scores over text: tokens as HTML spans shaded by the sign and size of their score.

::

    token_html(["the", "cat", "<b>"], [0.2, -1.0, 0.0])   # '<span class="hs-tok" ...>the</span> ...'
    token_image([["the", "cat"]], [[0.2, -1.0]])           # the same shading drawn by Pillow

Red is positive and blue negative, as the diverging maps of ``hookscope.viz.images`` draw them;
the stronger the colour, the larger ``|score| / scale`` (``scale`` is the largest ``|score|``
unless given, so several texts can share one). Each span's title holds the score, so hovering
shows it. Every token is HTML-escaped, quotes too (a token ``<img onerror=...>`` is drawn as text,
captum#1226); the fragment has inline styles only: no script, no class sheet, no external URL.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from ..base.optional import require
from ..errors import ShapeError

POSITIVE = (178, 24, 43)  # RdBu_r's red end
NEGATIVE = (33, 102, 172)  # RdBu_r's blue end
MAX_ALPHA = 0.85  # the strongest shade still leaves dark text readable
WIDTH, FONT, PAD = 720, 14, 4  # token_image: pixels a line, text size, padding around a token
SPAN_STYLE = "padding:1px 2px;margin:0 1px;border-radius:3px;line-height:1.9;white-space:pre-wrap"


def token_html(tokens: Sequence[str], scores: Sequence[float] | Tensor, *, scale: float | None = None) -> str:
    """One ``<span>`` per token, background shaded by its score, joined by spaces (see module doc).

    ``scores`` has one number per token (a list or a 1-D tensor). ``scale`` is the ``|score|``
    drawn at full strength (None: the largest finite ``|score|``); larger ones are clipped to it.
    A NaN score draws no colour.
    """
    values = _floats(scores)
    if len(values) != len(tokens):
        raise ShapeError(f"token_html got {len(tokens)} tokens but {len(values)} scores; pass one score per token")
    finite = [abs(v) for v in values if math.isfinite(v)]
    reach = scale if scale is not None else max(finite, default=0.0)
    return " ".join(_span(str(token), value, reach) for token, value in zip(tokens, values, strict=True))


def shade(value: float, scale: float) -> str:
    """The CSS background of a score: ``rgba`` of red (+) or blue (-), alpha by ``|value| / scale``."""
    if not math.isfinite(value) or scale <= 0 or value == 0:
        return "transparent"
    r, g, b = POSITIVE if value > 0 else NEGATIVE
    alpha = MAX_ALPHA * min(abs(value) / scale, 1.0)
    return f"rgba({r},{g},{b},{alpha:.3f})"


def token_image(
    rows: Sequence[Sequence[str]], scores: Sequence[Sequence[float] | Tensor], *, scale: float | None = None
) -> Any:
    """A PIL image of ``token_html``'s shading: each row's tokens on their own lines (wrapped at
    ``WIDTH`` pixels), rows a blank line apart, one ``scale`` for all (None: the largest finite ``|score|``)."""
    pil: Any = require("PIL.Image")
    draw_mod: Any = require("PIL.ImageDraw")
    font = _font()
    values = [_floats(row) for row in scores]
    reach = scale if scale is not None else max((abs(v) for row in values for v in row if math.isfinite(v)), default=0)
    placed, x, y, line = [], PAD, PAD, FONT + 3 * PAD
    for tokens, row in zip(rows, values, strict=True):
        for token, value in zip(tokens, row, strict=True):
            width = int(font.getlength(str(token))) + 2 * PAD
            if x + width > WIDTH and x > PAD:
                x, y = PAD, y + line
            placed.append((x, y, width, str(token), value))
            x += width + PAD
        x, y = PAD, y + line + PAD
    canvas = pil.new("RGB", (WIDTH, max(y, line)), "white")
    pen = draw_mod.Draw(canvas)
    for x, y, width, token, value in placed:
        pen.rectangle((x, y, x + width, y + line - PAD), fill=_rgb(value, reach))
        pen.text((x + PAD, y + PAD), token, fill="black", font=font)
    return canvas


def _font() -> Any:
    image_font: Any = require("PIL.ImageFont")
    try:
        return image_font.load_default(size=FONT)
    except ImportError:  # Pillow without FreeType: its bitmap font
        return image_font.load_default()


def _rgb(value: float, scale: float) -> tuple[int, int, int]:
    """``shade``'s colour over white, as Pillow draws it."""
    if not math.isfinite(value) or scale <= 0 or value == 0:
        return (255, 255, 255)
    alpha = MAX_ALPHA * min(abs(value) / scale, 1.0)
    r, g, b = POSITIVE if value > 0 else NEGATIVE
    return (round(255 + (r - 255) * alpha), round(255 + (g - 255) * alpha), round(255 + (b - 255) * alpha))


def _span(token: str, value: float, scale: float) -> str:
    style = f"{SPAN_STYLE};background:{shade(value, scale)}"
    title = html.escape(f"{value:+.4g}", quote=True)
    return f'<span class="hs-tok" style="{style}" title="{title}">{html.escape(token, quote=True)}</span>'


def _floats(scores: Sequence[float] | Tensor) -> list[float]:
    if isinstance(scores, Tensor):
        if scores.dim() > 1:
            raise ShapeError(f"token_html takes one score per token, got a tensor of shape {tuple(scores.shape)}")
        return [float(v) for v in scores.detach().cpu().double().reshape(-1).tolist()]
    return [float(v) for v in scores]
