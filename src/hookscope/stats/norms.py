"""Sums of squares that stay exact on large tensors: what a norm of a weight, a gradient or an edit's
change is made of.

``torch.linalg.vector_norm`` (and ``torch._foreach_norm``) of a float32 tensor accumulates in
float32 along the whole tensor and drifts with its length: 7e-5 relative on a 2M-element weight,
2e-2 on a 100M one. Here a tensor is cut into rows of ``ROW`` elements, each row's 2-norm is taken
(one vectorised reduction), and their squares are added in float64: exact to about 1e-7 relative
(each row's float32 rounding) whatever the length, at the cost of one ``vector_norm``, with no copy
of the tensor.

A float32 row norm overflows to inf once the row's squares pass 3.4e38 (elements near 1e19), and
a finite tensor must give a finite norm: the rows whose float32 norm is inf are taken again in
float64 (``_widened``), where no finite float32 tensor can overflow. Finding them reads one flag
from the device per tensor; the float64 pass (40 times the cost of the float32 one on the CPU)
runs only for the overflowed rows. NaN stays NaN, and an inf element gives inf: "non-finite"
means the tensor held a NaN or an infinity, never that its norm was large.
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
    vector (half precision and integers are widened to float32 first); finite for a finite ``t``."""
    flat = _flat(t)
    tail = _rows(flat)
    overflowed = torch.isinf(tail)
    if flat.dtype == F64 or not bool(overflowed.any()):  # float64 overflows only past 1e154: not widened
        return tail
    return _widened(flat, tail, overflowed)


def each_row_norms(tensors: list[Tensor]) -> list[Tensor]:
    """``row_norms`` of each of ``tensors``, the same values, with one overflow check for all of them
    (one flag read from the device, not one per tensor) when they share a device."""
    flats = [_flat(t) for t in tensors]
    norms = [_rows(f) for f in flats]
    narrow = [n for n in norms if n.dtype != F64]
    if len({n.device for n in narrow}) > 1 or (narrow and bool(torch.cat(narrow).isinf().any())):
        return [row_norms(t) for t in tensors]  # some row overflowed (rare): each tensor on its own
    return norms


def _flat(t: Tensor) -> Tensor:
    flat = t.detach().reshape(-1)
    return flat if flat.dtype in (torch.float32, F64) else flat.float()


def _rows(flat: Tensor) -> Tensor:
    """The float32 (or float64) 2-norms of ``flat``'s rows of ``ROW``, the last row shorter."""
    whole = flat.numel() - flat.numel() % ROW
    tail: Tensor = torch.linalg.vector_norm(flat[whole:]).reshape(1)
    if whole:
        rows: Tensor = torch.linalg.vector_norm(flat[:whole].view(-1, ROW), dim=1)
        tail = torch.cat([rows, tail])
    return tail


def _widened(flat: Tensor, norms: Tensor, overflowed: Tensor) -> Tensor:
    """``norms`` in float64, the ``overflowed`` rows of ``flat`` taken again in float64 (inf only if they hold one)."""
    out, chosen = norms.to(F64), overflowed.nonzero().flatten()
    count = flat.numel() // ROW  # full rows; the row at index ``count`` is the shorter tail
    body = chosen[chosen < count]
    if body.numel():
        out[body] = torch.linalg.vector_norm(flat[: count * ROW].view(-1, ROW)[body], dim=1, dtype=F64)
    if bool(overflowed[count]):
        out[count] = torch.linalg.vector_norm(flat[count * ROW :], dtype=F64)
    return out
