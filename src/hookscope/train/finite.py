"""Is a tensor finite: the cheap check made on every call, and the exact count made once.

The cheap check is ``torch.aminmax``: one fused reduction, as fast as a ``sum`` (it reads each
element once and writes two numbers), and exact where a sum is not. NaN propagates through
both ends, an infinity shows at the end it sits at, and a finite tensor gives two finite numbers;
a sum could also overflow to inf from large finite values (a false alarm) and cannot tell NaN
from ``inf + -inf``. The two numbers also give ``max |x|`` for free, which the messages quote.
An ``isfinite(t).all()`` writes a boolean tensor the size of ``t`` first: ten times slower here.

A *level* orders how bad a tensor is: 0 finite, 1 holds an infinity (no NaN), 2 holds a NaN.
A producer is a call whose output is at a higher level than its inputs (see ``producer``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

FINITE, INF, NAN = 0, 1, 2


def checkable(tensor: Tensor) -> bool:
    """A floating or complex tensor with elements: the only kind that can hold NaN or inf."""
    return (tensor.is_floating_point() or tensor.is_complex()) and tensor.numel() > 0


def extremes(tensor: Tensor) -> Tensor:
    """``[min, max]`` of ``tensor`` (a complex tensor: of its real and imaginary parts), on its device."""
    values = tensor.detach()
    if values.is_complex():
        values = torch.view_as_real(values)
    return torch.stack(torch.aminmax(values))  # (2,)


def level(low: float, high: float) -> int:
    """The level of a tensor whose ``extremes`` are ``low, high``."""
    if math.isnan(low) or math.isnan(high):
        return NAN
    return INF if math.isinf(low) or math.isinf(high) else FINITE


def absmax(low: float, high: float) -> float:
    """``max |x|`` from the extremes (NaN when the tensor holds a NaN)."""
    return max(abs(low), abs(high))


@dataclass(frozen=True)
class Count:
    """How many elements of a tensor are NaN, +inf and -inf, of how many, and the largest finite |x|."""

    nan: int
    posinf: int
    neginf: int
    numel: int
    finite_absmax: float  # 0.0 when no element is finite

    @property
    def nonfinite(self) -> int:
        return self.nan + self.posinf + self.neginf

    def words(self) -> str:
        """``nan``, ``inf``, ``-inf``, ``inf and -inf``, ``nan and inf``... what the tensor holds."""
        held = [w for w, n in (("nan", self.nan), ("inf", self.posinf), ("-inf", self.neginf)) if n]
        return " and ".join(held) if held else "finite"


def count(tensor: Tensor) -> Count:
    """The exact count (a few passes over ``tensor``: made once, for the producer only)."""
    values = tensor.detach()
    if values.is_complex():
        values = torch.view_as_real(values)
    finite = torch.isfinite(values)
    nan = int(torch.isnan(values).sum())
    posinf = int(torch.isposinf(values).sum())
    kept = values[finite]
    top = float(kept.abs().max()) if kept.numel() else 0.0
    return Count(nan, posinf, int(values.numel() - finite.sum()) - nan - posinf, values.numel(), top)


def words(low: float, high: float) -> str:
    """What a tensor holds, from its extremes alone: ``nan``, ``inf``, ``-inf``, ``inf and -inf``, ``finite``."""
    if math.isnan(low) or math.isnan(high):
        return "nan"
    held = [w for w, hit in (("inf", high == math.inf), ("-inf", low == -math.inf)) if hit]
    return " and ".join(held) if held else "finite"
