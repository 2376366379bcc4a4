"""Sums of squares that stay exact on large tensors: what a norm of a weight, a gradient or an edit's
change is made of.

``torch.linalg.vector_norm`` (and ``torch._foreach_norm``) of a float32 tensor accumulates in
float32 along the whole tensor and drifts with its length: 7e-5 relative on a 2M-element weight,
2e-2 on a 100M one. Here a tensor is cut into rows of ``ROW`` elements, each row's 2-norm is taken
(one vectorised reduction), and their squares are added in float64: exact to about 1e-7 relative
(each row's float32 rounding) whatever the length, at the cost of one ``vector_norm``, with no copy
of the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

F64 = torch.float64
ROW = 4096  # elements per row of the partial norms


def square_sum(t: Tensor) -> Tensor:
    """The sum of squares of ``t``'s elements, a float64 scalar on its device (see ``row_norms``)."""
    return row_norms(t).to(F64).square().sum()


def squared_norm(tensors: Iterable[Tensor]) -> Tensor | None:
    """The sum of squares of every tensor's elements (float64, on the first one's device); None when there is none.

    The row norms of all of them in one vector, squared and added in float64 at once: a few
    vectorised reductions per tensor and four small ops in all, not four per tensor.
    """
    chosen = list(tensors)
    if not chosen:
        return None
    device = chosen[0].device
    return torch.cat([row_norms(t).to(device) for t in chosen]).to(F64).square().sum()


def row_norms(t: Tensor) -> Tensor:
    """2-norms of ``t``'s elements in rows of ``ROW`` (the last row shorter), a float32 or float64
    vector (half precision and integers are widened to float32 first)."""
    flat = t.detach().reshape(-1)
    if flat.dtype not in (torch.float32, F64):
        flat = flat.float()
    whole = flat.numel() - flat.numel() % ROW
    tail: Tensor = torch.linalg.vector_norm(flat[whole:]).reshape(1)
    if not whole:
        return tail
    rows: Tensor = torch.linalg.vector_norm(flat[:whole].view(-1, ROW), dim=1)
    return torch.cat([rows, tail])
