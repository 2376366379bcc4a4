"""The graph drawn by hookscope: inline SVG (``svg``), an HTML fragment with a legend and each folded
block opened below it (``graph_html``, the report's section and the notebook view), ``.table()``.

::

    html = graph_html(graph, links={"conv1": "#layer-0"})   # clicking a box goes to its layer card
    print(graph.table())

Each box is a call that ran no other module (or a repeated block, folded: click it to open the
block's own drawing); a module that ran more than once has a box per call, ``relu#0``, ``relu#1``
(``hookscope.graph.nodes``), linked to the module's card and coloured by the module's value unless
the overlay has one for the call; its title (hover) says its name, type, calls, the overlay's value and the
bytes its forward left saved for the backward; a folded block also says what checkpointing it
would free. Solid lines carry a module's output to the next module; dashed orange ones come
through functional code (residual joins). The SVG has its size in px, so it stays readable on a
narrow screen (it scrolls) and with hundreds of modules (repeated blocks are folded).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping

from ..base.words import columns, format_size
from .arrange import BOX_H, BOX_W, Box, Line, arrange
from .labels import fitted, frame_labels, text_width
from .nodes import INPUT, OUTPUT, Graph, split_name
from .overlay import color, ink, scale

LABEL_W = BOX_W - 16  # px a box's label may take; a longer one loses its middle (``labels.fitted``)
JOIN = "#e8710a"
DASHED = ' stroke-dasharray="5 2"'
RED_KEY = ' · <span style="color:#d62728">■</span> non-finite'


def svg(graph: Graph, *, within: str | None = None, links: Mapping[str, str] | None = None, uid: str = "g") -> str:
    """The drawing as an SVG element (``within``: a folded block's name, drawn open; ``links``: module name ->
    the href its box goes to; ``uid``: unique among the SVGs of one page)."""
    drawing = arrange(graph, within=within)
    values = label_values(graph)
    lo, hi, log = scale(values)
    parts = [
        f'<svg class="hs-graph" width="{drawing.width:.0f}" '
        f'height="{drawing.height:.0f}" viewBox="0 0 {drawing.width:.0f} {drawing.height:.0f}" role="img" '
        f'aria-label="{_e(f"module graph of {graph.model}" + (f", block {within}" if within else ""))}" '
        'font-family="system-ui, sans-serif">',
        f'<defs><marker id="{uid}-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>',
    ]
    labels = frame_labels([(f.name, f.type, f.x, f.y, f.w) for f in drawing.frames], 9)
    parts += [
        (
            f'<g class="frame"><rect x="{frame.x:.0f}" y="{frame.y:.0f}" width="{frame.w:.0f}" height="{frame.h:.0f}" '
            f'rx="8" fill="#6b7a99" fill-opacity="0.06" stroke="#9aa5bd" stroke-width="1"/>'
            f"<title>{_e(frame.name)} · {_e(frame.type)}</title>"
            f'<text x="{frame.x + 6:.0f}" y="{frame.y + 10:.0f}" font-size="9" fill="#5a6680">'
            f"{_e(labels[frame.name])}</text></g>"
        )
        for frame in drawing.frames
    ]
    parts += [_line(line, uid) for line in drawing.lines]
    parts += [_box(graph, box, values, (lo, hi, log), links or {}) for box in drawing.boxes]
    parts.append("</svg>")
    return "".join(parts)


def label_values(graph: Graph) -> dict[str, float]:
    """Each node's number (its own, else its module's: ``Graph.value``), with each folded block given its own
    value or else the largest of the nodes inside it."""
    values = {node.name: value for node in graph.nodes if (value := graph.value(node.name)) is not None}
    for block in graph.blocks:
        if block not in values:
            inside = [values[node.name] for node in graph.under(block) if node.name in values]
            if inside:
                values[block] = max(inside, key=lambda v: math.inf if math.isnan(v) else v)
    return values


def _box(
    graph: Graph, box: Box, values: Mapping[str, float], span: tuple[float, float, bool], links: Mapping[str, str]
) -> str:
    if box.name in (INPUT, OUTPUT):
        return (
            f'<g class="end"><rect x="{box.x:.0f}" y="{box.y + 6:.0f}" width="{BOX_W}" height="{BOX_H - 12}" rx="11" '
            f'fill="#eef0f4" stroke="#b8bfcc"/><text x="{box.x + BOX_W / 2:.0f}" y="{box.y + BOX_H / 2 + 4:.0f}" '
            f'font-size="11" text-anchor="middle" fill="#445">{box.name}</text></g>'
        )
    value = values.get(box.name)
    fill = color(value, *span)
    text = ink(fill)
    href = f"#graph-block-{_slug(box.name)}" if box.folded else links.get(box.name, links.get(split_name(box.name)[0]))
    shape = (
        f'<rect x="{box.x:.0f}" y="{box.y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="5" fill="{fill}" '
        f'stroke="{"#334" if box.folded else "#8a93a6"}" stroke-width="{2 if box.folded else 1}"'
        f"{DASHED if box.folded else ''}/>"
        f'<text x="{box.x + 8:.0f}" y="{box.y + 14:.0f}" font-size="11" font-weight="600" fill="{text}">'
        f"{_e(fitted(box.name, LABEL_W, 11, bold=True))}</text>"
        f'<text x="{box.x + 8:.0f}" y="{box.y + 27:.0f}" font-size="9.5" fill="{text}">'
        f"{_e(_second_line(graph, box, value))}</text>"
    )
    inner = f'<g class="node" data-name="{_e(box.name)}"><title>{_e(_title(graph, box, value))}</title>{shape}</g>'
    return f'<a href="{_e(href)}">{inner}</a>' if href else inner


def _second_line(graph: Graph, box: Box, value: float | None) -> str:
    """The type, and after it the box's value, which call of its module it is (a module called at several
    places has a box per call), or what a folded block holds; a long type loses its middle, the rest stays."""
    node = graph.node(box.name)
    tail = f" · {_number(value)}" if value is not None else ""
    if node.call is not None:
        tail = f" · call #{node.call} of {node.calls}{tail}"
    if box.folded:
        tail = f" ▸ {len({n.module for n in graph.under(box.name)}) - 1} modules"
    room = LABEL_W - text_width(tail, 9.5)
    if room < text_width("Mo…ule", 9.5):
        return fitted(box.type + tail, LABEL_W, 9.5, dotted=False)
    return fitted(box.type, room, 9.5, dotted=False) + tail


def _title(graph: Graph, box: Box, value: float | None) -> str:
    node = graph.node(box.name)
    calls = f"{node.calls} call{'s' if node.calls > 1 else ''}"
    if node.call is not None:
        calls = f"call {node.call} of {node.module} ({calls} in all)"
    lines = [f"{box.name} ({node.type}), {calls}"]
    if value is not None:
        inside = box.folded and box.name not in graph.overlay
        lines.append(f"{graph.column}: {_number(value)}" + (" (largest inside)" if inside else ""))
    lines.append(f"saved for backward: {format_size(graph.saved_under(box.name))}")
    if box.folded:
        lines.append(f"checkpointing it would free {format_size(node.checkpoint)}; click to open")
    return "\n".join(lines)


def _line(line: Line, uid: str) -> str:
    """The edge along its run: a curve within the gap between neighbouring layers, else a lane's corners."""
    (x1, y1), (x2, y2) = line.points[0], line.points[-1]
    if len(line.points) == 2:
        middle = (y1 + y2) / 2
        path = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{middle:.0f} {x2:.0f},{middle:.0f} {x2:.0f},{y2:.0f}"
    else:
        path = "M" + " L".join(f"{x:.0f},{y:.0f}" for x, y in line.points)
    join = line.via == "autograd"
    style = f'stroke="{JOIN}" stroke-dasharray="4 3"' if join else 'stroke="#888"'
    end = f'marker-end="url(#{uid}-arrow)"'
    shape = 'stroke-width="1.3" stroke-linejoin="round"'
    return f'<path class="edge {line.via}" d="{path}" fill="none" {style} {shape} {end}/>'


def legend(graph: Graph) -> str:
    """The scale's colours from its smallest to its largest value, and what the lines mean (HTML)."""
    lines = (
        '<span class="hs-key"><svg width="28" height="8"><path d="M0,4 H28" stroke="#888" stroke-width="1.5"/></svg>'
        ' output to input</span> <span class="hs-key"><svg width="28" height="8"><path d="M0,4 H28" '
        f'stroke="{JOIN}" stroke-dasharray="4 3" stroke-width="1.5"/></svg> through functional code (a join)</span>'
    )
    if not graph.overlay:
        return f'<p class="hs-legend">{lines}</p>'
    lo, hi, log = scale(label_values(graph))
    stops = ", ".join(
        color(lo + (hi - lo) * i / 10 if not log else lo * (hi / lo) ** (i / 10), lo, hi, log) for i in range(11)
    )
    bad = any(not math.isfinite(v) for v in graph.overlay.values())
    return (
        f'<p class="hs-legend"><b>{_e(graph.column)}</b>{" (log scale)" if log else ""}: {_number(lo)} '
        f'<span style="display:inline-block;width:120px;height:10px;vertical-align:middle;'
        f'background:linear-gradient(to right, {stops})"></span> {_number(hi)}'
        f"{RED_KEY if bad else ''} · white: no value · {lines}</p>"
    )


def graph_html(graph: Graph, *, links: Mapping[str, str] | None = None) -> str:
    """The overview, its legend, and each folded block's drawing in a ``<details>`` its box opens."""
    total = sum(n.saved for n in graph.nodes)
    head = (
        f'<p class="hs-graph-note">{len({n.module for n in graph.nodes})} modules ran ({len(graph.nodes)} calls), '
        f"{len(graph.leaves())} drawn as boxes; built by {_e(graph.built)} ({_e(graph.note)}). "
        f"Saved for backward: {format_size(total)}.</p>"
    )
    blocks = "".join(
        f'<details id="graph-block-{_slug(b)}" class="hs-block"><summary>{_e(b)} · {_e(graph.node(b).type)}, '
        f"saves {format_size(graph.saved_under(b))} for backward; checkpointing it would free "
        f'{format_size(graph.node(b).checkpoint)}</summary><div class="hs-graph-scroll" style="overflow:auto">'
        f"{svg(graph, within=b, links=links, uid=f'g{i}')}</div></details>"
        for i, b in enumerate(graph.blocks)
    )
    overview = f'<div class="hs-graph-scroll" style="overflow:auto;max-height:80vh">{svg(graph, links=links)}</div>'
    view = '<div class="hs-graph-view" style="overflow-wrap:anywhere">'  # a long block name wraps, not the page
    return f"{view}{head}{legend(graph)}{overview}{blocks}</div>"


def _number(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


def graph_table(graph: Graph) -> str:
    """A row per node (a module, or a call of one that ran more than once), in call order."""
    rows = [
        (
            "  " * n.name.count(".") + (n.name or "(model)"),
            n.type,
            str(n.calls),
            format_size(n.saved),
            format_size(graph.saved_under(n.name)),
            "" if n.leaf else format_size(n.checkpoint),
            "" if (value := graph.value(n.name)) is None else _number(value),
        )
        for n in sorted(graph.nodes, key=lambda n: n.order)
    ]
    head = ("module", "type", "calls", "saved", "saved inside", "checkpoint frees", graph.column or "value")
    return "\n".join(columns([head, *rows], right=(2, 3, 4, 5, 6)))
