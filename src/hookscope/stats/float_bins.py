"""The fixed histogram grid of ``RunningStats``: 8 bins per power of two over the whole float32 range.

The histogram counts finite values on one fixed grid, the same for every run, read off the
bits of each value as a float32 (float64 values are rounded to float32 for it): its sign,
its 8 exponent bits and the top 3 bits of its mantissa. That is 8 bins per power of two,
each 1/8 of its lower end wide (at most 12.5%), over the whole float32 range: no value falls
outside, and ``EDGES`` is exact. Bins are by magnitude: a positive bin holds ``lo <= x < hi``,
a negative one ``-hi < x <= -lo``; ``+0.0`` and ``-0.0`` sit on either side of 0. A grid
fixed in advance is what makes histograms of different runs add up: edges taken from a
first batch's range would differ from run to run and could not be merged. The price is
relative resolution: percentiles read from it would be approximate, so none are given.
"""

from __future__ import annotations

import torch
from torch import Tensor

HALF = 2048  # bins of each sign: 256 exponents x 8 mantissa steps (the last 8, inf and NaN, stay empty)
BINS = 2 * HALF
_rank = torch.arange(HALF + 1, dtype=torch.float64)  # magnitude m(r): the float32 with bits r << 20
_exponent, _step = torch.div(_rank, 8, rounding_mode="floor"), _rank % 8
_MAGNITUDES = torch.where(_exponent > 0, 2.0 ** (_exponent - 127) * (1 + _step / 8), 2.0**-126 * _step / 8)
EDGES: Tensor = torch.cat([-_MAGNITUDES.flip(0), _MAGNITUDES[1:]])  # (BINS + 1,) ascending; bin i: EDGES[i]..EDGES[i+1]
FLOAT32_MAX = torch.finfo(torch.float32).max


def histogram(values: Tensor) -> Tensor:
    """Counts of the finite ``values`` on the fixed grid (module docstring): a (BINS,) int64 tensor."""
    return ascending(bin_keys(values))


def bin_keys(values: Tensor) -> Tensor:
    """Counts by the top 12 bits of each value as float32: positives 0..2047, then negatives, each by
    growing magnitude; keys 2040..2047 and 4088..4095 (exponent 255) are inf and NaN."""
    if values.dtype == torch.float64:  # finite values beyond float32's range go to the outermost bins
        values = torch.where(values.isinf(), values, values.clamp(-FLOAT32_MAX, FLOAT32_MAX))
    bits = values.reshape(-1).to(torch.float32).view(torch.int32)
    return torch.bincount((bits >> 20) & (BINS - 1), minlength=BINS)


def ascending(by_key: Tensor) -> Tensor:
    """Key order to ascending values, inf and NaN dropped."""
    counts = torch.cat([by_key[HALF:].flip(0), by_key[:HALF]])
    counts[:8] = 0  # -inf and NaN with the sign bit
    counts[-8:] = 0  # +inf and NaN
    return counts


def linear_histogram(hist: Tensor, lo: float, hi: float, bins: int) -> tuple[list[float], list[float]]:
    """Grid counts redrawn on ``bins`` equal bins over [lo, hi]: each grid bin's count spread evenly
    over the part of it inside [lo, hi] (a picture of the distribution, not exact counts)."""
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)  # (bins + 1,)
    grid = EDGES.clamp(lo, hi)  # (BINS + 1,)
    left, right = grid[:-1], grid[1:]  # (BINS,) each grid bin, clipped to [lo, hi]
    width = (right - left).clamp(min=1e-300)
    overlap = (torch.minimum(right[:, None], edges[None, 1:]) - torch.maximum(left[:, None], edges[None, :-1])).clamp(
        min=0
    )  # (BINS, bins)
    share = torch.where((right - left)[:, None] > 0, overlap / width[:, None], 0.0)
    point = (right - left) == 0  # a grid bin squeezed to a point (lo == hi inside it): its count goes whole
    where = torch.bucketize(left, edges[1:-1], right=True)
    share[point] = 0.0
    share[point, where[point]] = 1.0
    counts = hist.cpu().to(torch.float64) @ share  # (bins,)
    return counts.tolist(), edges.tolist()
