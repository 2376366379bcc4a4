"""The statistics ``watch`` logs, as pure functions on tensors, computed where the tensors are.

Everything here stays on the tensors' device and returns tensors (float64 moments, bool masks):
``watch`` combines the moments of every call of a logged step and brings them to the host in one
transfer when the step ends. Counts, means and sums of squared deviations rather than finished
statistics, so that several forward and backward passes in one step (gradient accumulation)
combine exactly. ``DeadWindows`` keeps each site's alive masks over the dead window.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn

F64 = torch.float64
ACT = ("count", "mean", "m2", "sum_abs", "zeros")
ROW = 4096  # elements per row of square_sum's partial norms  # the entries of activation_moments' vector
CHANNELS_FIRST = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.modules.pooling._MaxPoolNd)


def unit_dim(module: nn.Module, output: Tensor) -> int:
    """The dimension that indexes a layer's units: channels (1) for convolutions and maps of 4+ dims,
    features (the last) otherwise (a Linear's (B, F) or a transformer's (B, T, F))."""
    if output.dim() <= 1:
        return 0
    return 1 if output.dim() >= 4 or isinstance(module, CHANNELS_FIRST) else output.dim() - 1


def activation_moments(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """``(len(ACT),)`` float64 (count, mean, M2 = the sum of squared deviations, sum |x|, zeros) of ``x`` and
    its units' alive mask ``(x.shape[dim],)`` bool: True where the unit is nonzero for some sample.

    Reductions that torch vectorises, in float32 or float64 (half precision is widened first): a
    sum; the sum of squared deviations from that mean (the two-pass formula, as stable as
    Welford's; ``torch.var_mean`` gives the same at about 20 times the cost on the CPU); the sum of
    |x|; and per unit the sum of sign(|x|), its count of nonzeros (exact below 2^24 elements a unit
    in float32; ``count_nonzero`` costs 5 times as much). A NaN makes its unit's count NaN: the
    zero fraction is then NaN, which the non-finite alert names. The float64 results combine
    exactly over calls (``combine``). Sums of float32 values above ~1e19 overflow: then (one flag
    read from the device tells) the moments are taken again in float64, so finite values give
    finite moments.
    """
    x = x.detach()
    if x.dtype not in (torch.float32, F64):
        x = x.float()
    moments, alive = _moments(x, dim)
    if x.dtype != F64 and not bool(moments.isfinite().all()):  # overflowed in float32, or a NaN / inf in x
        moments = _moments(x.to(F64), dim)[0]  # finite unless x holds a NaN or an inf
    return moments, alive


def _moments(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    n = x.numel()
    mean = x.sum() / n
    m2 = (x - mean).square_().sum()  # a sum: torch's float32 2-norm is 1000x less exact here
    magnitude = x.abs()
    sum_abs = magnitude.sum()
    signs = magnitude.sign_()  # in place, as square_ above: the same values, one temporary fewer each
    others = [d for d in range(x.dim()) if d != dim]
    nonzero = signs.sum(dim=others) if others else signs.reshape(-1)
    sums = torch.stack([mean, m2, sum_abs, nonzero.sum()]).to(F64)
    count = torch.tensor(float(n), dtype=F64, device=x.device)
    return torch.stack([count, sums[0], sums[1], sums[2], count - sums[3]]), nonzero > 0


def combine(a: Tensor, b: Tensor) -> Tensor:
    """Two ``activation_moments`` vectors as one (Chan et al.'s parallel formula for the mean and M2)."""
    n = a[0] + b[0]
    delta = b[1] - a[1]
    mean = a[1] + delta * b[0] / n
    m2 = a[2] + b[2] + delta.square() * a[0] * b[0] / n
    return torch.stack([n, mean, m2, a[3] + b[3], a[4] + b[4]])


def dead_fraction(masks: Iterable[Tensor]) -> Tensor:
    """The fraction of units alive in none of ``masks`` (each ``(units,)`` bool, the same units)."""
    alive = torch.stack(list(masks)).any(0)
    return 1 - alive.to(F64).mean()


class DeadWindows:
    """Each site's alive masks over its last ``size`` logged steps; ``fraction`` adds one, gives the dead fraction."""

    def __init__(self, names: Iterable[str], size: int) -> None:
        self._windows: dict[str, collections.deque[Tensor]] = {n: collections.deque(maxlen=size) for n in names}

    def fraction(self, name: str, alive: Tensor | None) -> Tensor | None:
        """Add ``alive`` (None: the site had no output this step) and return the dead fraction of the window."""
        if alive is None:
            return None
        window = self._windows[name]
        if window and window[-1].shape != alive.shape:  # the units changed: a new window
            window.clear()
        window.append(alive)
        return dead_fraction(window)


def activation_row(moments: list[float]) -> tuple[float, float, float, float]:
    """Mean, std (unbiased), mean |x| and the fraction of zeros from ``activation_moments`` combined."""
    count, mean, m2, absolute, zeros = moments
    if count == 0:
        return (math.nan,) * 4
    std = math.sqrt(max(m2, 0.0) / (count - 1)) if count > 1 else 0.0
    return mean, std if math.isfinite(m2) else math.nan, absolute / count, zeros / count
