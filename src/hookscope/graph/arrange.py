"""Where each box of a graph goes: longest-path layers, then barycentric order within each layer.

::

    drawing = arrange(graph)                  # the overview: each repeated block folded to one box
    drawing = arrange(graph, within="layer1.0")   # one block opened: the modules inside it

The boxes are the calls that ran nothing inside (``Graph.leaves``: a module called twice, a shared
ReLU, is two boxes, ``relu#0`` and ``relu#1``), a folded block standing for every call that ran
inside it; ``input`` and ``output`` end the flow. The graph has no cycle and its edges go forward
in call order; boxes go down in layers: a box sits one layer below the lowest box that feeds it
(the longest path from the input), where "feeds" counts only edges that go forward in call order,
so the one edge that can go up (between two folded blocks whose calls interleave) is drawn curving
up the side instead of making a cycle. Within a layer, boxes start in call order and
are then sorted a few times by the mean position of their neighbours above, then below
(barycentric ordering), which untangles parallel branches. A container (``layer1``,
``encoder``) is a frame around its boxes. Each edge's run is routed around the boxes
(``hookscope.graph.routes``): an edge longer than one layer, or going up, takes a lane right of the
boxes it passes. No graphviz: this module and that one are the whole layout.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..errors import OptionError
from .nodes import INPUT, OUTPUT, Graph
from .routes import routes

BOX_W, BOX_H = 168, 34  # a box's size in px
GAP_X, GAP_Y = 18, 30  # between boxes of a layer, between layers
MARGIN = 24
SWEEPS = 4  # barycentric passes down and up


@dataclass(frozen=True)
class Box:
    """One box: a module (a leaf, or a folded block), ``input`` or ``output``; ``x, y`` its top left."""

    name: str
    type: str
    x: float
    y: float
    folded: bool


@dataclass(frozen=True)
class Frame:
    """A container drawn around the boxes of the modules that ran inside it."""

    name: str
    type: str
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Line:
    """An edge between two boxes; ``back`` when it goes up (a module called again); ``points``: where it runs,
    from the source's bottom to the target's top, never through another box (``hookscope.graph.routes``)."""

    source: str
    target: str
    via: str
    back: bool
    points: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Drawing:
    """A laid-out graph: its size in px, boxes, frames (outermost first) and lines."""

    width: float
    height: float
    boxes: tuple[Box, ...]
    frames: tuple[Frame, ...]
    lines: tuple[Line, ...]

    def box(self, name: str) -> Box:
        return next(box for box in self.boxes if box.name == name)


def arrange(graph: Graph, *, within: str | None = None) -> Drawing:
    """Lay out ``graph`` (``within=None``: the overview, blocks folded; a block's name: that block open)."""
    if within is not None and within not in graph.blocks:
        raise OptionError(f"within={within!r} is not a folded block of the graph; pass one of {list(graph.blocks)}")
    owner = _owners(graph, within)
    items = _items(graph, owner)
    edges = _edges(graph, owner)
    order = {name: i for i, name in enumerate(items)}
    layers = _layers(items, edges, order)
    rows = _ordered(layers, edges, order)
    return _place(graph, rows, edges, order, within)


def _owners(graph: Graph, within: str | None) -> dict[str, str]:
    """Each leaf -> the box it is drawn in: the outermost folded block it ran inside, itself, or (a leaf that
    did not run inside ``within``) nothing."""
    parents = {node.name: node.parent for node in graph.nodes}
    owner = {}
    for node in graph.leaves():
        chain = _chain(node.name, parents)
        if within is not None:
            if within in chain[1:]:
                owner[node.name] = node.name
            continue
        folded = [name for name in chain if name in graph.blocks]
        owner[node.name] = folded[-1] if folded else node.name
    return owner


def _chain(name: str, parents: dict[str, str | None]) -> list[str]:
    """``name``, the node it ran inside, the one that ran inside, ... out to the model."""
    chain = [name]
    while (up := parents.get(chain[-1])) is not None and up not in chain:
        chain.append(up)
    return chain


def _items(graph: Graph, owner: dict[str, str]) -> list[str]:
    """The boxes in call order, between ``input`` and ``output``."""
    seen: dict[str, None] = {INPUT: None}
    for node in sorted(graph.leaves(), key=lambda n: n.order):
        if node.name in owner:
            seen.setdefault(owner[node.name], None)
    seen[OUTPUT] = None
    return list(seen)


def _edges(graph: Graph, owner: dict[str, str]) -> dict[tuple[str, str], str]:
    """Edges between boxes (self-loops of a folded block dropped); inside an open block, edges from or to
    modules outside it start at ``input`` or end at ``output``."""
    found: dict[tuple[str, str], str] = {}
    for edge in graph.edges:
        source = owner.get(edge.source, INPUT if edge.source != OUTPUT else OUTPUT)
        target = owner.get(edge.target, OUTPUT)
        if edge.source not in owner and edge.target not in owner:
            continue  # outside an open block altogether
        if source != target:
            found.setdefault((source, target), edge.via)
    return found


def _layers(items: list[str], edges: dict[tuple[str, str], str], order: dict[str, int]) -> dict[str, int]:
    """Each box's layer: one below the lowest box feeding it by a forward edge (longest path)."""
    feeds: dict[str, list[str]] = defaultdict(list)
    for source, target in edges:
        if order[source] < order[target]:
            feeds[target].append(source)
    layer: dict[str, int] = {}
    for name in items[:-1]:  # call order is a topological order of the forward edges; output last
        layer[name] = max((layer[s] + 1 for s in feeds[name]), default=0 if name == INPUT else 1)
    layer[OUTPUT] = max(layer.values()) + 1
    return layer


def _ordered(layer: dict[str, int], edges: dict[tuple[str, str], str], order: dict[str, int]) -> list[list[str]]:
    """The boxes of each layer, sorted by barycentre: the mean position of their neighbours."""
    rows: list[list[str]] = [[] for _ in range(max(layer.values()) + 1)]
    for name in sorted(layer, key=order.__getitem__):
        rows[layer[name]].append(name)
    up: dict[str, list[str]] = defaultdict(list)
    down: dict[str, list[str]] = defaultdict(list)
    for source, target in edges:
        if layer[source] < layer[target]:
            up[target].append(source)
            down[source].append(target)
    for _ in range(SWEEPS):
        for sweep, neighbours in ((range(1, len(rows)), up), (range(len(rows) - 2, -1, -1), down)):
            at = {name: i for row in rows for i, name in enumerate(row)}
            for i in sweep:
                rows[i].sort(key=lambda n: _barycentre(n, neighbours[n], at))
    return rows


def _barycentre(name: str, neighbours: list[str], at: dict[str, int]) -> float:
    if not neighbours:
        return float(at[name])
    return sum(at[n] for n in neighbours) / len(neighbours)


def _place(
    graph: Graph, rows: list[list[str]], edges: dict[tuple[str, str], str], order: dict[str, int], within: str | None
) -> Drawing:
    widest = max(len(row) for row in rows)
    width = 2.0 * MARGIN + widest * BOX_W + (widest - 1) * GAP_X
    types = {node.name: node.type for node in graph.nodes} | {INPUT: "", OUTPUT: ""}
    boxes = []
    for depth, row in enumerate(rows):
        used = len(row) * BOX_W + (len(row) - 1) * GAP_X
        left = (width - used) / 2
        for i, name in enumerate(row):
            x, y = left + i * (BOX_W + GAP_X), MARGIN + depth * (BOX_H + GAP_Y)
            boxes.append(Box(name, types[name], x, y, name in graph.blocks and name != within))
    height = 2 * MARGIN + len(rows) * BOX_H + (len(rows) - 1) * GAP_Y
    layer = {name: depth for depth, row in enumerate(rows) for name in row}
    spots = {box.name: (box.x, box.y) for box in boxes}
    runs = routes(list(edges), spots, layer, (BOX_W, BOX_H, GAP_Y))
    lines = tuple(
        Line(s, t, via, layer[t] <= layer[s], run) for ((s, t), via), run in zip(edges.items(), runs, strict=True)
    )
    width = max([width, *(x + MARGIN for run in runs for x, _ in run)])  # the lanes right of the boxes
    return Drawing(width, height, tuple(boxes), _frames(graph, boxes, within), lines)


def _frames(graph: Graph, boxes: list[Box], within: str | None) -> tuple[Frame, ...]:
    """A frame per container with boxes inside it, padded more the further out it is."""
    frames = []
    containers = [n for n in graph.nodes if not n.leaf and n.name and n.name not in graph.blocks]
    if within is not None:
        opened = {n.name for n in graph.under(within)} - {within}
        containers = [n for n in containers if n.name in opened]
    top = min((n.name.count(".") for n in containers), default=0)
    for node in containers:
        held = {n.name for n in graph.under(node.name)} - {node.name}
        inside = [b for b in boxes if b.name in held]
        if not inside:
            continue
        pad = max(2, 8 - 3 * (node.name.count(".") - top))  # outer frames wider: nested ones show inside
        x0, y0 = min(b.x for b in inside) - pad, min(b.y for b in inside) - pad - 9
        x1, y1 = max(b.x for b in inside) + BOX_W + pad, max(b.y for b in inside) + BOX_H + pad
        frames.append(Frame(node.name, node.type, x0, y0, x1 - x0, y1 - y0))
    return tuple(sorted(frames, key=lambda f: f.name.count(".")))
