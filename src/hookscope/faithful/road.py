"""ROAD: remove the most (or least) relevant pixels and fill them in from their neighbours.

ROAD (Rong et al. 2022, "A Consistent and Efficient Evaluation Strategy for Attribution Methods")
replaces removed pixels by a noisy linear imputation rather than a constant, so the model cannot
read the shape of the removed region. A removed pixel's value is the weighted mean of its eight
neighbours (weight 1/6 for the four sharing an edge, 1/12 for the diagonals; neighbours outside
the image left out), removed neighbours included: one sparse linear system per channel, whose
solution gets ``noise * N(0, 1)`` added (``noise=0.01``, drawn from a seeded generator).

The system over the removed pixels is built here in one vectorised pass and solved with SuperLU
(scipy), all channels at once; pytorch-grad-cam builds the same matrix entry by entry in a
``lil_matrix`` before the same solver, so the solutions agree to rounding.

Thresholds follow pytorch-grad-cam: at percentile ``p`` the most-relevant-first order keeps the
pixels whose map value is below the map's ``p``-th percentile (numpy's linear interpolation), and
the least-relevant-first order does the same with ``1 - map``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..base.optional import require

PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)
NOISE = 0.01


# (row offset, column offset, weight) of each neighbour, pytorch-grad-cam's order
NEIGHBOURS = (
    (1, 1, 1 / 12), (0, 1, 1 / 6), (-1, 1, 1 / 12), (1, -1, 1 / 12),
    (0, -1, 1 / 6), (-1, -1, 1 / 12), (1, 0, 1 / 6), (-1, 0, 1 / 6),
)  # fmt: skip


def kept(heat: Tensor, percentile: float, *, most_relevant_first: bool) -> Tensor:
    """(H, W) bool: the pixels a ROAD step keeps (True) for one map ``heat`` (H, W) at ``percentile``."""
    values = heat if most_relevant_first else 1 - heat
    threshold = torch.quantile(values.double().flatten(), percentile / 100).to(values.dtype)  # numpy's linear rule
    return values < threshold


def impute(image: Tensor, keep: Tensor) -> Tensor:
    """Removed pixels filled in linearly from their neighbours, without noise: (C, n) float64 values of the
    removed pixels (row-major order) of ``image`` (C, H, W), where ``keep`` (H, W) is False.

    The system is built in one vectorised pass (a compressed sparse column matrix) and solved with
    SuperLU (``scipy.sparse.linalg.splu``, symmetric mode), every channel at once.
    """
    sparse = require("scipy.sparse")
    linalg = require("scipy.sparse.linalg")
    c, h, w = image.shape
    flat = image.double().reshape(c, -1)
    missing = (~keep).flatten()
    where = missing.nonzero().flatten()
    n = where.numel()
    slot = torch.full((h * w,), -1, dtype=torch.long)
    slot[where] = torch.arange(n)
    row, col = where // w, where % w
    diagonal = torch.ones(n, dtype=torch.float64)
    b = torch.zeros(n, c, dtype=torch.float64)
    rows, cols, values = [torch.arange(n)], [torch.arange(n)], []
    for dy, dx, weight in NEIGHBOURS:
        y, x = row + dy, col + dx
        inside = (y >= 0) & (x >= 0) & (y < h) & (x < w)
        diagonal[~inside] -= weight
        target = (y * w + x)[inside]
        ids = inside.nonzero().flatten()
        known = ~missing[target]
        b[ids[known]] -= weight * flat[:, target[known]].t()
        rows.append(ids[~known])
        cols.append(slot[target[~known]])
        values.append(torch.full((int((~known).sum()),), weight, dtype=torch.float64))
    values.insert(0, -diagonal)
    matrix = sparse.csc_matrix(
        (torch.cat(values).numpy(), (torch.cat(rows).numpy(), torch.cat(cols).numpy())), shape=(n, n)
    )
    # symmetric: a minimum-degree ordering of A + A^T without pivoting is ~6x faster than spsolve's default
    factors = linalg.splu(matrix, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    solution = factors.solve(b.numpy())
    return torch.as_tensor(solution, dtype=torch.float64).reshape(n, c).t()


def noisy(image: Tensor, keep: Tensor, solution: Tensor, generator: torch.Generator, noise: float = NOISE) -> Tensor:
    """``image`` (C, H, W) with its removed pixels (``keep`` False) set to ``solution`` (C, n) plus
    ``noise * N(0, 1)``, drawn as a (C, n) block from ``generator``: the order pytorch-grad-cam draws in
    (``randn_like`` of its solution, which SuperLU returns column-major), so one seed gives the same noise."""
    c = image.shape[0]
    where = (~keep).flatten().nonzero().flatten()
    out = image.clone().reshape(c, -1)
    draws = torch.randn(c, where.numel(), generator=generator, dtype=image.dtype)
    out[:, where] = solution.to(image.dtype) + noise * draws.to(image.device)
    return out.reshape(image.shape)
