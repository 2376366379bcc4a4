"""``Graph.plot()``: the overview drawn with Pillow from the same layout as the SVG (boxes, lines, names).

::

    graph.plot().save("graph.png")     # what the notebook shows as a picture, and the guide's

Curves are drawn as straight lines and back edges as elbows up the right side; colours, names
and types are the SVG's. Pillow is imported here (``pip install 'hookscope[viz]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base.display import shows_as
from ..base.optional import require
from .arrange import BOX_H, BOX_W, arrange
from .labels import fitted, frame_labels
from .nodes import INPUT, OUTPUT, Graph
from .overlay import color, ink, scale
from .svg import JOIN, graph_html, graph_table, label_values

if TYPE_CHECKING:
    from PIL.Image import Image


def graph_picture(graph: Graph, *, within: str | None = None) -> Image:
    """The drawing (``within``: a folded block, open) as an RGB picture."""
    pil: Any = require("PIL.Image")
    draw_module: Any = require("PIL.ImageDraw")
    drawing = arrange(graph, within=within)
    image: Image = pil.new("RGB", (int(drawing.width), int(drawing.height)), "white")
    draw = draw_module.Draw(image)
    labels = frame_labels([(f.name, f.type, f.x, f.y, f.w) for f in drawing.frames], 10)
    for frame in drawing.frames:
        draw.rounded_rectangle(
            (frame.x, frame.y, frame.x + frame.w, frame.y + frame.h), 8, fill="#f5f6f9", outline="#9aa5bd"
        )
        draw.text((frame.x + 6, frame.y + 1), labels[frame.name], fill="#5a6680")
    for line in drawing.lines:
        draw.line(list(line.points), fill=JOIN if line.via == "autograd" else "#888888", width=1)
    values = label_values(graph)
    span = scale(values)
    for box in drawing.boxes:
        end = box.name in (INPUT, OUTPUT)
        fill = "#eef0f4" if end else color(values.get(box.name), *span)
        draw.rounded_rectangle(
            (box.x, box.y, box.x + BOX_W, box.y + BOX_H),
            5,
            fill=fill,
            outline="#334" if box.folded else "#8a93a6",
            width=2 if box.folded else 1,
        )
        draw.text((box.x + 8, box.y + 5), fitted(box.name, BOX_W - 16, 10), fill=ink(fill))
        draw.text((box.x + 8, box.y + 19), fitted(box.type, BOX_W - 16, 10), fill=ink(fill))
    return image


shows_as(Graph, table=graph_table, plot=graph_picture)(graph_html)
