"""The training pictures: an exact zero has its own colour in the layers x steps heatmap (log10 has no zero)."""

from __future__ import annotations

import io
import math

import pytest

from hookscope.viz.curves import ZERO, heatmap_png

PIL = pytest.importorskip("PIL.Image")


def _colours(png: bytes) -> set[tuple[int, int, int]]:
    image = PIL.open(io.BytesIO(png)).convert("RGB")
    return {colour for _, colour in image.getcolors(maxcolors=1 << 20)}


def test_an_exact_zero_is_drawn_in_its_own_colour_not_blank() -> None:
    zero = tuple(int(ZERO[i : i + 2], 16) for i in (1, 3, 5))
    names, steps = ["fc1", "fc2"], [0, 10, 20]
    with_zero = heatmap_png(names, steps, [[1.0, 0.0, 0.1], [1e-3, math.nan, 2.0]], title="t")
    without = heatmap_png(names, steps, [[1.0, 0.5, 0.1], [1e-3, math.nan, 2.0]], title="t")
    assert zero in _colours(with_zero)  # the zero cell (and its legend swatch)
    assert zero not in _colours(without)
