"""The statistics ``watch`` logs, as pure functions on tensors, computed where the tensors are.

Everything here stays on the tensors' device and returns tensors (float64 sums, bool masks):
``watch`` adds up the sums of every call of a logged step and brings them to the host in one
transfer when the step ends (``row``). Sums rather than means so that several forward and
backward passes in one step (gradient accumulation) combine exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn

F64 = torch.float64
ACT = ("sum", "sum_sq", "sum_abs", "zeros", "count")  # the entries of activation_sums' vector
CHANNELS_FIRST = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.modules.pooling._MaxPoolNd)


def unit_dim(module: nn.Module, output: Tensor) -> int:
    """The dimension that indexes a layer's units: channels (1) for convolutions and maps of 4+ dims,
    features (the last) otherwise (a Linear's (B, F) or a transformer's (B, T, F))."""
    if output.dim() <= 1:
        return 0
    return 1 if output.dim() >= 4 or isinstance(module, CHANNELS_FIRST) else output.dim() - 1


def activation_sums(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """``(ACT,)`` float64 sums of ``x`` (sum, sum of squares, sum |x|, zeros, count) and its units' alive
    mask: ``(x.shape[dim],)`` bool, True where the unit is nonzero for some sample and position."""
    x = x.detach()
    sums = torch.stack([
        x.sum(dtype=F64),
        x.square().sum(dtype=F64),
        x.abs().sum(dtype=F64),
        (x == 0).sum().to(F64),
        torch.tensor(float(x.numel()), dtype=F64, device=x.device),
    ])  # fmt: skip
    alive = (x != 0).movedim(dim, 0).reshape(x.shape[dim], -1).any(1) if x.dim() else (x != 0).reshape(1)
    return sums, alive


def squared_norm(tensors: Iterable[Tensor]) -> Tensor | None:
    """The sum of squares of every tensor's elements (float64, on their device); None when there is none."""
    total: Tensor | None = None
    for t in tensors:
        part = t.detach().square().sum(dtype=F64)
        total = part if total is None else total + part.to(total.device)
    return total


def dead_fraction(masks: Iterable[Tensor]) -> Tensor:
    """The fraction of units alive in none of ``masks`` (each ``(units,)`` bool, the same units)."""
    alive = torch.stack(list(masks)).any(0)
    return 1 - alive.to(F64).mean()


def activation_row(sums: list[float]) -> tuple[float, float, float, float]:
    """Mean, std (unbiased), mean |x| and the fraction of zeros from ``activation_sums`` added up."""
    total, squares, absolute, zeros, count = sums
    if count == 0:
        return (math.nan,) * 4
    mean = total / count
    var = max(squares - total * mean, 0.0) / (count - 1) if count > 1 else 0.0
    if not (math.isfinite(total) and math.isfinite(squares)):
        var = math.nan
    return mean, math.sqrt(var), absolute / count, zeros / count
