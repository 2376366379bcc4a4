"""Moments of float64 values, mergeable: the count, mean, sum of squared deviations, mean |x|, min, max.

Of all the values (one group) or of each slice along a dimension (one group per channel).
Non-finite values are left out; each call computes its moments in two passes (the mean, then the
squared deviations from it), and ``merge_moments`` combines two sets with Chan, Golub and
LeVeque's pairwise formula (Welford's update is its one-element case), so long streams do not
lose precision to cancellation. ``hookscope.stats.streaming.RunningStats`` is built on these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class Moments:
    """Moments of the finite values of ``C`` groups (one per channel, or ``C == 1`` for all)."""

    n: Tensor  # (C,) int64, finite values
    mean: Tensor  # (C,) float64
    m2: Tensor  # (C,) float64, sum of squared deviations from the mean
    mean_abs: Tensor  # (C,) float64
    min: Tensor  # (C,) float64, +inf where n == 0
    max: Tensor  # (C,) float64, -inf where n == 0

    @property
    def var(self) -> Tensor:
        """Population variance (ddof=0), NaN where a group has no finite value."""
        return self.m2 / self.n.to(torch.float64)


def moments(values: Tensor, dim: int | None = None, *, finite: bool | None = None) -> Moments:
    """Moments of float64 ``values``: of all of them (C == 1), or of each slice along ``dim`` (C slices).

    Two passes: the mean, then the squared deviations from it. Non-finite values are left out;
    when there is none (``finite``, or seen from the sum), no mask is built.
    """
    if dim is None:
        values, dim = values.reshape(1, -1), 0
    dim %= values.dim()
    if values.dim() == 1:  # one value per group
        values = values[:, None]
    dims = [d for d in range(values.dim()) if d != dim]  # never empty: torch would read [] as every dim
    groups = values.shape[dim]
    if not values.numel():
        return empty_moments(groups, values.device)
    total = values.sum(dims)  # (C,)
    if finite or (finite is None and bool(total.isfinite().all())):  # NaN or inf would show in the sum
        n = torch.full((groups,), values.numel() // groups, dtype=torch.int64, device=values.device)
        mean = total / n
        m2 = torch.linalg.vector_norm(values - _along(mean, dim, values.dim()), dim=dims).square()
        mean_abs = torch.linalg.vector_norm(values, ord=1, dim=dims) / n
        return Moments(n, mean, m2, mean_abs, values.amin(dims), values.amax(dims))
    return _masked_moments(values, dim, dims)


def _masked_moments(values: Tensor, dim: int, dims: list[int]) -> Moments:
    """``moments`` when some values are NaN or infinite: two passes over the finite ones."""
    finite = values.isfinite()
    n = finite.sum(dims)
    kept = torch.where(finite, values, 0.0)
    mean = kept.sum(dims) / n.clamp(min=1)  # 0 for a group with no finite value
    centred = torch.where(finite, values - _along(mean, dim, values.dim()), 0.0)
    lo = torch.where(finite, values, math.inf).amin(dims)
    hi = torch.where(finite, values, -math.inf).amax(dims)
    return Moments(n, mean, centred.square().sum(dims), kept.abs().sum(dims) / n.clamp(min=1), lo, hi)


def merge_moments(a: Moments, b: Moments) -> Moments:
    """The moments of both groups of values (Chan, Golub & LeVeque 1979)."""
    n = a.n + b.n
    weight = b.n.to(torch.float64) / n.clamp(min=1)  # (C,): b's share
    delta = b.mean - a.mean
    return Moments(
        n=n,
        mean=a.mean + delta * weight,
        m2=a.m2 + b.m2 + delta.square() * a.n * weight,
        mean_abs=a.mean_abs + (b.mean_abs - a.mean_abs) * weight,
        min=torch.minimum(a.min, b.min),
        max=torch.maximum(a.max, b.max),
    )


def empty_moments(groups: int, device: torch.device | None = None) -> Moments:
    """The moments of no value at all, for ``groups`` groups."""
    zero = torch.zeros(groups, dtype=torch.float64, device=device)
    return Moments(zero.long(), zero, zero, zero, zero + math.inf, zero - math.inf)


def _along(vector: Tensor, dim: int, ndim: int) -> Tensor:
    """``vector`` (C,) shaped to broadcast along ``dim`` of an ``ndim``-D tensor."""
    shape = [1] * ndim
    shape[dim] = -1
    return vector.reshape(shape)


def moments_to(m: Moments, device: torch.device) -> Moments:
    """``m`` with every tensor moved to ``device``."""
    return replace(m, **{f.name: getattr(m, f.name).to(device) for f in fields(Moments)})
