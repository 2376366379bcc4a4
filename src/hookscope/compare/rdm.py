"""Representational similarity analysis (RSA), pure functions: dissimilarity matrices and their rank correlation.

For a batch of ``n`` inputs, a representation's RDM is ``1 - r(x_i, x_j)``, the Pearson correlation
between the rows of two inputs (Kriegeskorte et al. 2008). Two representations are as similar as
their RDMs, compared by the Spearman correlation of their upper triangles (``n(n-1)/2`` pairs;
ties are ranked in order). Over several batches, the measure is the mean of the batches' values,
each batch weighted alike, in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rdm(features: Tensor) -> Tensor:
    """``(n, ...)`` -> ``(n, n)`` float64: one minus the correlation between each pair of rows."""
    rows = features.reshape(features.shape[0], -1).double()  # (n, d)
    rows = rows - rows.mean(dim=1, keepdim=True)
    rows = rows / rows.norm(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float64).tiny)
    similar: Tensor = rows @ rows.T  # (n, n)
    return 1.0 - similar


def upper(rdms: Tensor) -> Tensor:
    """``(L, n, n)`` -> ``(L, n(n-1)/2)``: each matrix's entries above the diagonal, row by row."""
    n = rdms.shape[-1]
    i, j = torch.triu_indices(n, n, offset=1)
    return rdms[:, i, j]


def spearman(a: Tensor, b: Tensor) -> Tensor:
    """``(A, m)``, ``(B, m)`` -> ``(A, B)``: the Spearman correlation of every row of ``a`` with every row of ``b``."""
    za, zb = _standard_ranks(a), _standard_ranks(b)  # (A, m), (B, m)
    return za @ zb.T / a.shape[-1]


def _standard_ranks(values: Tensor) -> Tensor:
    ranks = values.argsort(dim=-1).argsort(dim=-1).double()  # (L, m): 0 .. m-1
    ranks = ranks - ranks.mean(dim=-1, keepdim=True)
    return ranks / ranks.square().mean(dim=-1, keepdim=True).sqrt()
