"""Attention as pictures: one T x T heatmap per head, token labels on both axes, and their mean.

::

    hookscope.attention_grid(att, layer=3).save("att.png")           # every head, then the head mean
    hookscope.attention_grid(att, layer="encoder.layer.3", heads=[0, 5], batch=1)

Row ``i`` of a panel is where token ``i`` (the query, on the left) looks; columns are the keys
(along the bottom). Padding is left out. Each head gets its own colour scale, from 0 to its
largest weight (written in the panel title), so a head that spreads its weight thin is not a
blank square (colours: matplotlib's viridis). Drawn with Pillow, fast enough for a report of
every layer; long tokens are cut to 14 characters, and past 48 tokens every k-th is labelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..base.display import shows_as
from ..base.optional import require
from ..base.words import columns as text_columns
from ..errors import OptionError
from ..viz.fragments import MAX_ROWS, Safe, image_tag, more, table, view
from .attention import Attention

if TYPE_CHECKING:
    from PIL.Image import Image

COLUMNS = 7  # panels per row: 12 heads and their mean fit two rows
MAX_LABELS = 48  # tokens labelled on an axis; longer sequences get every k-th label
MAX_CHARS = 14  # a longer token label is cut with an ellipsis
CMAP = "viridis"
CELL, MAX_SIDE = 12, 480  # pixels a token's cell, and most a heatmap's side
FONT, HEAD, GAP, MAX_GUTTER = 10, 16, 10, 90  # label size; title band; space between panels; label room


def attention_grid(
    att: Attention,
    layer: str | int = 0,
    *,
    batch: int = 0,
    heads: Sequence[int] | None = None,
    columns: int = COLUMNS,
    mean: bool = True,
) -> Image:
    """A PIL image of ``layer``'s heads (all, or ``heads``) for sequence ``batch``, and their mean (see module doc).

    Args:
        att: what ``hookscope.attention`` returned.
        layer: a name in ``att.layers``, the block holding one attention, or an index (default: the first).
        batch: the sequence drawn.
        heads: the heads drawn; None draws all.
        columns: panels per row.
        mean: add a panel of the chosen heads' mean (when there are several).

    Returns:
        A PIL image, a panel per head, tokens on both axes, padding left out.

    Raises:
        OptionError: ``batch`` or a head is out of range.
        NotCapturedError: no attention ran at ``layer``.
        SelectionError: ``layer`` holds several attention modules.
    """
    name = att.layer_name(layer)
    weights = att.weights(name)  # (B, H, T, T)
    if not 0 <= batch < weights.shape[0]:
        raise OptionError(f"batch={batch} is out of range: the attention holds {weights.shape[0]} sequences")
    chosen = list(range(weights.shape[1])) if heads is None else [int(h) for h in heads]
    if not chosen or any(not 0 <= h < weights.shape[1] for h in chosen):
        raise OptionError(f"heads={list(chosen)} must name heads in 0..{weights.shape[1] - 1}")
    keep = att.mask[batch].to(weights.device)
    real = weights[batch][:, keep][:, :, keep].float().cpu()  # (H, t, t) without padding
    tokens = att.real_tokens(batch)
    panels = [(f"head {h}", real[h]) for h in chosen]
    if mean and len(chosen) > 1:
        panels.append((f"mean of {len(chosen)} heads", real[chosen].mean(0)))
    return _draw(panels, tokens, title=name, columns=max(1, min(columns, len(panels))))


def attention_table(att: Attention, *, batch: int = 0) -> str:
    """``att.table()``: a line per layer with its heads, its weights' shape, and the token that
    sequence ``batch``'s real tokens look at most (the head mean's column sums, padding left out)."""
    if not 0 <= batch < att.mask.shape[0]:
        raise OptionError(f"batch={batch} is out of range: the attention holds {att.mask.shape[0]} sequences")
    tokens = att.real_tokens(batch)
    rows = [["layer", "heads", "shape", "most looked at"]]
    for name in att.layers:
        weights = att.weights(name)
        keep = att.mask[batch].to(weights.device)
        received = att.mean_heads(name)[batch][keep][:, keep].sum(dim=0)  # (t,): weight each key gets
        top = int(received.argmax())
        share = float(received[top]) / max(1, len(tokens))
        rows.append([name, str(weights.shape[1]), "x".join(map(str, weights.shape)), f"{tokens[top]} ({share:.2f})"])
    return "\n".join(text_columns(rows, right=(1,)))


@shows_as(Attention, table=attention_table, plot=attention_grid)
def attention_html(att: Attention) -> Safe:
    """A notebook's view: a row per layer (heads, shape) with a thumbnail of its head mean (sequence 0)."""
    rows = []
    for name in att.layers[:MAX_ROWS]:
        shape = att.weights(name).shape
        rows.append((name, shape[1], "x".join(map(str, shape)), image_tag(_mean_picture(att, name), alt=name)))
    tokens = " ".join(att.real_tokens(0))
    body = Safe(table(("layer", "heads", "shape", "head mean, sequence 0"), rows, numeric=(1,)))
    body = Safe(body + more(min(len(att.layers), MAX_ROWS), len(att.layers), "layers"))
    return view(body, title=f"Attention of {len(att.layers)} layers on: {tokens}")


def _mean_picture(att: Attention, name: str) -> Image:
    keep = att.mask[0].to(att.weights(name).device)
    mean = att.mean_heads(name)[0][keep][:, keep].float().cpu()
    top = float(mean.max()) or 1.0
    return _heat(mean / top, max(2, 96 // max(1, mean.shape[0])))


def _draw(panels: list[tuple[str, Tensor]], tokens: list[str], *, title: str, columns: int) -> Image:
    """The panels in rows of ``columns``, each a heatmap with its tokens left (queries) and below (keys)."""
    pil: Any = require("PIL.Image")
    draw_mod: Any = require("PIL.ImageDraw")
    font = _font(FONT)
    cell = max(4, min(CELL, MAX_SIDE // max(1, len(tokens))))
    labels = _labels(tokens)
    gutter = min(MAX_GUTTER, max((_width(font, t) for t in labels if t), default=0) + 4)
    side = cell * len(tokens)
    titles = max(_width(font, f"{label} (max 1.00)") for label, _ in panels)
    width, height = gutter + max(side, titles) + GAP, HEAD + side + gutter + GAP
    rows = math.ceil(len(panels) / columns)
    canvas = pil.new("RGB", (width * columns + GAP, HEAD + height * rows), "white")
    pen = draw_mod.Draw(canvas)
    pen.text((GAP, 2), title, fill="black", font=_font(FONT + 2))
    for index, (label, values) in enumerate(panels):
        x, y = GAP + width * (index % columns), HEAD + height * (index // columns)
        top = float(values.max()) or 1.0
        pen.text((x + gutter, y + 2), f"{label} (max {top:.2f})", fill="black", font=font)
        heat = _heat(values / top, cell)
        canvas.paste(heat, (x + gutter, y + HEAD))
        _axis_labels(canvas, pen, labels, font, origin=(x + gutter, y + HEAD), cell=cell, gutter=gutter)
    image: Image = canvas
    return image


def _heat(values: Tensor, cell: int) -> Image:
    """``(t, t)`` values in [0, 1] as a colour picture, ``cell`` pixels a square."""
    np: Any = require("numpy")
    pil: Any = require("PIL.Image")
    matplotlib: Any = require("matplotlib")
    rgb = matplotlib.colormaps[CMAP](values.clamp(0, 1).numpy())[..., :3]  # (t, t, 3)
    array = np.ascontiguousarray((rgb * 255).round().astype("uint8"))
    heat: Image = pil.fromarray(array).resize((cell * values.shape[1], cell * values.shape[0]), pil.Resampling.NEAREST)
    return heat


def _axis_labels(
    canvas: Any, pen: Any, labels: list[str], font: Any, *, origin: tuple[int, int], cell: int, gutter: int
) -> None:
    """Query labels right-aligned left of the heatmap, key labels written upwards below it."""
    pil: Any = require("PIL.Image")
    draw_mod: Any = require("PIL.ImageDraw")
    x0, y0 = origin
    side = cell * len(labels)
    for i, text in enumerate(labels):
        if not text:
            continue
        w = _width(font, text)
        middle = y0 + i * cell + cell // 2
        pen.text((x0 - 3 - w, middle), text, fill="black", font=font, anchor="lm")
        strip = pil.new("RGB", (min(w, gutter - 3) + 2, FONT + 4), "white")
        draw_mod.Draw(strip).text((0, (FONT + 4) // 2), text, fill="black", font=font, anchor="lm")
        upright = strip.rotate(90, expand=True)  # reads bottom to top, its end at the heatmap
        canvas.paste(upright, (x0 + i * cell + cell // 2 - upright.width // 2, y0 + side + 3))


def _labels(tokens: list[str]) -> list[str]:
    """Every token, or every k-th of a long sequence (the rest blank), cut to ``MAX_CHARS`` characters."""
    step = max(1, math.ceil(len(tokens) / MAX_LABELS))
    return [
        (t if len(t) <= MAX_CHARS else t[: MAX_CHARS - 1] + "…") if i % step == 0 else "" for i, t in enumerate(tokens)
    ]


def _width(font: Any, text: str) -> int:
    left, _, right, _ = font.getbbox(text)
    return int(right - left)


def _font(size: int) -> Any:
    """Pillow's bundled font at ``size`` pixels (its bitmap font where FreeType is missing)."""
    image_font: Any = require("PIL.ImageFont")
    try:
        return image_font.load_default(size=size)
    except ImportError:
        return image_font.load_default()
