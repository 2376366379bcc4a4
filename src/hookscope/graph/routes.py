"""Where each edge of a laid-out graph runs: never through a box other than its own two ends.

An edge between two neighbouring layers runs straight down the gap between them, where no box
is (drawn as a curve that stays in that gap). Any other edge (a U-Net's skip, a residual joining
several layers below, an edge going up) leaves the bottom of its source a quarter of the box's
width right of its centre (beside the straight edges, which leave from the centre), turns in the
gap below it to a *lane* right of every box of the layers it passes, runs down (or up) the lane,
and turns in the gap above its target into the target's top. Lanes are given shortest span first, each as
close to the boxes as it can be without sharing an x with a lane whose span it overlaps, so
nested skips nest (a U-Net's outermost skip has the outermost lane) and each stays visible. The
turns of edges that share a gap are staggered in y so their horizontal runs do not coincide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Point = tuple[float, float]
LANE_GAP = 26  # px from the rightmost box a lane passes to the nearest lane (clear of the frames around it)
LANE_STEP = 10  # px between two lanes whose spans overlap
STAGGER = 5  # px between the turns of two lanes in the same gap


def routes(
    ends: Sequence[tuple[str, str]],
    spots: Mapping[str, tuple[float, float]],
    layer: Mapping[str, int],
    size: tuple[float, float, float],
) -> list[tuple[Point, ...]]:
    """The points each edge ``(source, target)`` runs through, from the source's bottom to the target's top.

    ``spots``: each box's top left; ``layer``: each box's layer (row); ``size``: the boxes' width and
    height, and the gap between two layers. Pure geometry: the layout (``arrange``) calls it.
    """
    width, height, gap = size
    right: dict[int, float] = {}
    for name, (x, _) in spots.items():
        right[layer[name]] = max(right.get(layer[name], 0.0), x + width)
    placed: list[tuple[int, int, float]] = []  # (first row, last row, lane x)
    found: dict[int, tuple[Point, ...]] = {}
    long = [i for i, (s, t) in enumerate(ends) if layer[t] - layer[s] != 1]
    long.sort(key=lambda i: (_span(ends[i], layer)[1] - _span(ends[i], layer)[0], i))
    for i in long:
        first, last = _span(ends[i], layer)
        x = max((right.get(row, 0.0) for row in range(first, last + 1)), default=0.0) + LANE_GAP
        while any(a <= last and first <= b and abs(x - lane) < LANE_STEP for a, b, lane in placed):
            x += LANE_STEP
        turn = STAGGER * (sum(1 for a, b, _ in placed if a == first or b == last) % max(1, int(gap / 2 / STAGGER)))
        placed.append((first, last, x))
        found[i] = _lane_route(ends[i], spots, (width, height, gap), x, turn)
    for i, (source, target) in enumerate(ends):
        if i not in found:
            (sx, sy), (tx, ty) = spots[source], spots[target]
            found[i] = ((sx + width / 2, sy + height), (tx + width / 2, ty))
    return [found[i] for i in range(len(ends))]


def _span(edge: tuple[str, str], layer: Mapping[str, int]) -> tuple[int, int]:
    """The rows an edge's lane passes: those strictly between its ends going down, both ends' going up."""
    source, target = layer[edge[0]], layer[edge[1]]
    return (source + 1, target - 1) if target > source else (target, source)


def _lane_route(
    edge: tuple[str, str], spots: Mapping[str, tuple[float, float]], size: tuple[float, float, float], x: float,
    turn: float,
) -> tuple[Point, ...]:  # fmt: skip
    """Down from the source into the gap below it, over to the lane ``x``, along it to the gap above the
    target, over, and down into the target's top."""
    width, height, gap = size
    (sx, sy), (tx, ty) = spots[edge[0]], spots[edge[1]]
    out_y = sy + height + gap / 2 - turn
    in_y = ty - gap / 2 + turn
    start, end = (sx + width * 3 / 4, sy + height), (tx + width * 3 / 4, ty)  # beside the straight edges
    return (start, (start[0], out_y), (x, out_y), (x, in_y), (end[0], in_y), end)


def crosses(a: Point, b: Point, box: tuple[float, float, float, float]) -> bool:
    """Whether the segment ``a``-``b`` passes through the inside of ``box`` (left, top, right, bottom);
    touching its edge is not crossing. Liang-Barsky clipping against the box shrunk by half a pixel."""
    left, top, right, bottom = box[0] + 0.5, box[1] + 0.5, box[2] - 0.5, box[3] - 0.5
    dx, dy = b[0] - a[0], b[1] - a[1]
    low, high = 0.0, 1.0
    for p, q in ((-dx, a[0] - left), (dx, right - a[0]), (-dy, a[1] - top), (dy, bottom - a[1])):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True
