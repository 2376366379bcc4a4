"""Small HTML building blocks for inline notebook views: escaped tables, inline PNGs, "N more" caps.

::

    rows = [(name, Safe(image_tag(grid, alt=name, width=96))) for name, grid in shown]
    body = table(("site", "output"), rows) + more(len(shown), total, "sites")
    html = view(body, title="Capture of LeNet")   # one <div>, its CSS inline, nothing fetched

Every view a result registers with ``hookscope.base.display.shows_as`` is made of these, so each is
self-contained the same way: text is HTML-escaped unless it is a ``Safe`` string built here,
pictures are ``data:image/png`` URIs, the CSS is one ``<style>`` scoped to ``.hookscope-view``
(it cannot restyle the notebook around it), and there is no script and no URL.
Pillow is needed only by ``png_bytes`` and by ``image_tag`` given a PIL image.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PIL.Image import Image

THUMB = 96  # pixels: the width a thumbnail is shown at
MAX_ROWS = 24  # rows a table of sites (or calls) shows before "N more"

CSS = """
.hookscope-view { --hs-text: #1b2230; --hs-muted: #5f6b7e; --hs-line: #e2e6ec; --hs-soft: #f0f2f6;
  --hs-accent: #4f46e5; --hs-bad: #b42318; --hs-warn: #a15c07;
  color: var(--hs-text); font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
@media (prefers-color-scheme: dark) {
  .hookscope-view { --hs-text: #e6e9ef; --hs-muted: #98a2b3; --hs-line: #283041; --hs-soft: #1d2330;
    --hs-accent: #8e88ff; --hs-bad: #ff8a80; --hs-warn: #f5b544; }
}
.hookscope-view .hs-title { font-weight: 600; margin: 0 0 6px; }
.hookscope-view .hs-title code, .hookscope-view td code { font-family: ui-monospace, Menlo, Consolas, monospace; }
.hookscope-view { max-width: 100%; overflow-wrap: anywhere; }
/* a table wider than its room scrolls inside its own box; a long name wraps, but never a letter a line;
   the page around (a report, a notebook) does not restyle the cells */
.hookscope-view table.hs-table { display: block; max-width: 100%; overflow-x: auto; border-collapse: collapse;
  margin: 0; font-variant-numeric: tabular-nums; }
/* ... and shows that it does: a shadow on the edge that has more, a thin scrollbar (the covers are the
   background, --hs-bg: the page's --bg in a report, Canvas in a notebook) */
.hookscope-view table.hs-table { --hs-cover: var(--hs-bg, var(--bg, Canvas));
  background: linear-gradient(to right, var(--hs-cover) 30%, transparent) left / 24px 100% no-repeat local,
    linear-gradient(to left, var(--hs-cover) 30%, transparent) right / 24px 100% no-repeat local,
    radial-gradient(farthest-side at 0 50%, rgb(0 0 0 / .22), transparent) left / 10px 100% no-repeat scroll,
    radial-gradient(farthest-side at 100% 50%, rgb(0 0 0 / .22), transparent) right / 10px 100% no-repeat scroll;
  scrollbar-width: thin; scrollbar-color: var(--hs-muted) transparent; padding-bottom: 2px; }
.hookscope-view .hs-table th { text-align: left; color: var(--hs-muted); font-weight: 600; font-size: 11px;
  text-transform: uppercase; letter-spacing: .04em; border-bottom: 1px solid var(--hs-line); padding: 3px 10px 3px 0;
  white-space: nowrap; position: static; background: none; cursor: auto; }
.hookscope-view .hs-table th::after { content: none; }
.hookscope-view .hs-table td { text-align: left; vertical-align: middle; border-bottom: 1px solid var(--hs-line);
  padding: 3px 10px 3px 0; white-space: normal; overflow-wrap: anywhere; min-width: 12ch; }
.hookscope-view .hs-table td.hs-n { text-align: right; white-space: nowrap; min-width: 0; }
.hookscope-view .hs-thumb { display: block; max-width: 100%; height: auto; image-rendering: pixelated;
  border-radius: 3px; background: #fff; }
.hookscope-view .hs-more, .hookscope-view .hs-note { color: var(--hs-muted); font-size: 12px; margin: 4px 0 0; }
.hookscope-view .hs-bad { color: var(--hs-bad); font-weight: 600; }
.hookscope-view .hs-grids { display: flex; flex-wrap: wrap; gap: 12px; margin: 6px 0; }
.hookscope-view figure { margin: 0; max-width: 100%; }
.hookscope-view .hs-scroll { max-width: 100%; overflow-x: auto; }
.hookscope-view .hs-scroll .hs-thumb { max-width: none; }
.hookscope-view figcaption { color: var(--hs-muted); font-size: 12px; }
"""


class Safe(str):
    """A string of HTML built by these helpers: ``table`` and ``view`` put it in as it is, unescaped.

    ``Safe + text`` escapes ``text`` (unless it is ``Safe`` too) and is ``Safe``.
    """

    def __add__(self, other: str) -> Safe:
        return Safe(str.__add__(self, escape(other)))


def escape(value: object) -> Safe:
    """``str(value)`` with ``& < > " '`` escaped (a ``Safe`` string is kept as it is)."""
    return value if isinstance(value, Safe) else Safe(html.escape(str(value), quote=True))


def png_bytes(image: Image) -> bytes:
    """A PIL image as PNG bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def data_uri(png: bytes) -> str:
    """PNG bytes as a ``data:image/png;base64,...`` URI: the picture travels inside the page."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def image_tag(picture: bytes | Image, *, alt: str, width: int | None = THUMB) -> Safe:
    """An ``<img>`` of PNG bytes or a PIL image, inline, shown ``width`` pixels wide (None: its own size)."""
    png = picture if isinstance(picture, bytes) else png_bytes(picture)
    size = "" if width is None else f' width="{int(width)}"'
    return Safe(f'<img class="hs-thumb" src="{data_uri(png)}" alt="{escape(alt)}"{size}>')


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric: Iterable[int] = ()) -> Safe:
    """A ``<table>`` of ``rows`` under ``header``; cells escaped unless ``Safe``, columns ``numeric`` right-aligned."""
    right = set(numeric)

    def cell(c: int, value: Any) -> str:
        return f'<td class="hs-n">{escape(value)}</td>' if c in right else f"<td>{escape(value)}</td>"

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(c, v) for c, v in enumerate(row)) + "</tr>" for row in rows)
    return Safe(f'<table class="hs-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def more(shown: int, total: int, noun: str) -> Safe:
    """``<p>12 more sites not shown</p>`` when ``shown < total``, else nothing."""
    if shown >= total:
        return Safe("")
    return Safe(f'<p class="hs-more">{total - shown} more {escape(noun)} not shown</p>')


def note(text: str) -> Safe:
    """A muted line of text, escaped."""
    return Safe(f'<p class="hs-note">{escape(text)}</p>')


def figure(picture: bytes | Image, caption: str, *, width: int | None = None) -> Safe:
    """A picture with its caption below it."""
    tag = image_tag(picture, alt=caption, width=width)
    return Safe(f"<figure>{tag}<figcaption>{escape(caption)}</figcaption></figure>")


def view(body: str, *, title: str | None = None, css: str = "") -> Safe:
    """One self-contained ``<div class="hookscope-view">``: ``title`` (escaped), ``body``, and the inline CSS.

    ``css`` is added to ``CSS``; scope its rules under ``.hookscope-view`` (CSS nesting works:
    ``.hookscope-view { .layer { ... } }``) so the view cannot restyle the notebook.
    """
    head = "" if title is None else f'<p class="hs-title">{escape(title)}</p>'
    return Safe(f'<div class="hookscope-view"><style>{CSS}{css}</style>{head}{body}</div>')
