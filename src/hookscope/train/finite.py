"""Is a tensor finite: the cheap check made on every call, and the exact count made once.

The cheap check is ``torch.aminmax``: one fused reduction, as fast as a ``sum`` (it reads each
element once and writes two numbers), and exact where a sum is not. NaN propagates through
both ends, an infinity shows at the end it sits at, and a finite tensor gives two finite numbers;
a sum could also overflow to inf from large finite values (a false alarm) and cannot tell NaN
from ``inf + -inf``. The two numbers also give ``max |x|`` for free, which the messages quote.
An ``isfinite(t).all()`` writes a boolean tensor the size of ``t`` first: ten times slower here.

A *level* orders how bad a tensor is: 0 finite, 1 holds an infinity (no NaN), 2 holds a NaN.
A producer is a call whose output is at a higher level than its inputs (see ``producer``).

Some modules cannot turn finite values into non-finite ones (``keeps_finite``): a clamp (ReLU,
ReLU6, Hardtanh), a bounded function (Sigmoid, Tanh), a max, a copy (padding with a finite value,
Flatten). Fed finite inputs, their output is finite without reading it. Of those, the pointwise
ones whose slope is at most 1 in size (``pointwise``: ReLU6, Tanh...) also send back a finite
gradient for a finite one, when their input was finite.

A DTensor (FSDP2, tensor parallelism) is read on this rank's piece (``core.placement.local``):
its reductions would be collectives that only the ranks reading it would join.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..core.placement import local

FINITE, INF, NAN = 0, 1, 2


def checkable(tensor: Tensor) -> bool:
    """A floating or complex tensor with elements: the only kind that can hold NaN or inf."""
    return (tensor.is_floating_point() or tensor.is_complex()) and local(tensor).numel() > 0


# the modules whose output is finite whenever their inputs are (exact types: a subclass may compute more)
_CLAMPS = (nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.Sigmoid, nn.Tanh, nn.Hardsigmoid, nn.Softsign)
_COPIES: tuple[type[nn.Module], ...] = (nn.Identity, nn.Flatten, nn.Unflatten, nn.ReflectionPad1d, nn.ReflectionPad2d)
_COPIES += (nn.ReflectionPad3d, nn.ReplicationPad1d, nn.ReplicationPad2d, nn.ReplicationPad3d, nn.CircularPad1d)
_COPIES += (nn.CircularPad2d,)
_MAXIMA = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
_PADS = (nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d, nn.ConstantPad1d, nn.ConstantPad2d, nn.ConstantPad3d)


def keeps_finite(module: nn.Module) -> bool:
    """Is ``module``'s output finite whenever its inputs are (its forward and its hooks as torch made them)?"""
    kind = type(module)
    if "forward" in vars(module) or module._forward_hooks:
        return False  # its forward replaced, or a hook that may rewrite the output runs before the guard's
    if kind in _PADS:
        return math.isfinite(module.value)  # type: ignore[arg-type]
    if kind is nn.Hardtanh:
        return math.isfinite(module.min_val) and math.isfinite(module.max_val)  # type: ignore[arg-type]
    if kind is nn.LeakyReLU:
        return bool(abs(module.negative_slope) <= 1)  # type: ignore[arg-type]
    return kind in _CLAMPS or kind in _COPIES or kind in _MAXIMA


def pointwise(module: nn.Module) -> bool:
    """One elementwise op with a slope of at most 1 in size: finite gradient in, finite gradient out."""
    return type(module) in (*_CLAMPS, nn.LeakyReLU) and keeps_finite(module)


def extremes(tensor: Tensor) -> Tensor:
    """``[min, max]`` of ``tensor`` (a complex tensor: of its real and imaginary parts), on its device."""
    values = local(tensor)
    if values.is_complex():
        values = torch.view_as_real(values)
    return torch.stack(torch.aminmax(values))  # (2,)


def level(low: float, high: float) -> int:
    """The level of a tensor whose ``extremes`` are ``low, high``."""
    if math.isnan(low) or math.isnan(high):
        return NAN
    return INF if math.isinf(low) or math.isinf(high) else FINITE


def holds_nonfinite(tensor: Tensor) -> bool:
    """Does ``tensor`` (this rank's piece of it) hold a NaN or an infinity (one host sync)."""
    low, high = extremes(tensor).tolist()
    return level(low, high) > FINITE


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
    values = local(tensor)
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
