"""Tensor in, numbers out: ``summarize`` one tensor (across a capture: ``hookscope.stats.gradient_flow``).

The rules, in one place, so every number in a report means the same thing:

- The maths runs in float64 on the tensor's device; int and bool tensors are converted.
- ``count`` is every element. NaN and ±Inf are counted (``nan_count``, ``inf_count``) and left
  out of everything else: moments, ``l2``, percentiles and the histogram use the finite values.
- ``std`` is the population standard deviation (``ddof=0``, ``np.std``'s default).
- ``zero_fraction`` is exact zeros over ``count``.
- Percentiles interpolate linearly between order statistics (``np.percentile``'s default). They
  come from one full sort, not ``torch.quantile``, which refuses inputs over 2**24 elements:
  exact at any size, at O(n log n) time and one float64 copy of memory.
- The histogram has ``bins`` equal-width bins from the finite min to the finite max; each bin is
  ``[e_i, e_i+1)`` except the last, which also holds the max (``np.histogram``). A constant
  tensor gets the range ``(v - 0.5, v + 0.5)``, as numpy gives it.
- No finite value at all (an empty or all-NaN tensor): every statistic is NaN and the histogram
  is empty; ``summarize`` does not raise.
- ``per_channel=True`` also summarizes each slice along ``channel_dim``, counted on the tensor
  as given: 1 for ``(N, C, ...)`` batches (the default), 0 for a single ``(C, H, W)`` image,
  -1 for channels-last ``(N, ..., C)`` features.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..errors import OptionError

if TYPE_CHECKING:
    from PIL.Image import Image

PERCENTILES: tuple[float, ...] = (1, 5, 25, 50, 75, 95, 99)
NAN = float("nan")


@dataclass(frozen=True)
class Histogram:
    """``counts[i]`` finite values fell in ``[edges[i], edges[i + 1])`` (the last bin is closed)."""

    counts: list[int]
    edges: list[float]  # len(counts) + 1 of them, equally spaced


@dataclass(frozen=True)
class ChannelSummary:
    """One entry per channel (slice along ``dim``), finite values only, as in ``Summary``."""

    dim: int  # the channel dimension, counted from the front of the tensor as given
    mean: list[float]
    std: list[float]
    min: list[float]
    max: list[float]
    mean_abs: list[float]
    zero_fraction: list[float]


@dataclass(frozen=True)
class Summary(Shows):
    """What ``summarize`` found in one tensor (the module docstring has the rules).

    Attributes:
        count: every element, NaN and infinities included.
        mean: the mean of the finite values.
        std: their population standard deviation (ddof=0).
        min: the smallest finite value.
        max: the largest finite value.
        mean_abs: the mean of ``|x|`` over the finite values.
        l2: the Euclidean norm of the finite values.
        zero_fraction: exact zeros over ``count``.
        nan_count: how many elements are NaN.
        inf_count: how many are +Inf or -Inf.
        percentiles: percentile in [0, 100] -> its value (linear interpolation, numpy's default).
        histogram: ``bins`` equal-width bins from the finite min to the finite max.
        channels: the same statistics per channel with ``per_channel=True``, else None.
    """

    count: int
    mean: float
    std: float  # population (ddof=0)
    min: float
    max: float
    mean_abs: float
    l2: float
    zero_fraction: float
    nan_count: int
    inf_count: int
    percentiles: dict[float, float]  # percentile in [0, 100] -> value
    histogram: Histogram
    channels: ChannelSummary | None = None

    def __repr__(self) -> str:
        numbers = f"mean {self.mean:.4g}, std {self.std:.4g}, min {self.min:.4g}, max {self.max:.4g}"
        return f"<Summary of {self.count:,} values: {numbers}>"

    def table(self) -> str:
        """A row per statistic of ``as_dict()``, percentiles as ``p50`` (text).

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, *, log: bool = False) -> Image:
        """The histogram of the finite values; ``log`` puts the counts on a log scale.

        Args:
            log: put the counts on a log scale.

        Returns:
            A PIL image of the histogram.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        image: Image = plot_of(self, log=log)
        return image

    def as_dict(self) -> dict[str, Any]:
        """Plain Python for ``json.dumps(..., allow_nan=False)``: NaN becomes None, keys strings.

        Returns:
            The fields by name; the histogram as ``{"counts", "edges"}``, percentiles keyed by strings.
        """
        plain: dict[str, Any] = _plain(asdict(self))
        return plain


def summarize(
    tensor: Tensor,
    *,
    per_channel: bool = False,
    channel_dim: int = 1,
    bins: int = 50,
    percentiles: Sequence[float] = PERCENTILES,
) -> Summary:
    """Count, moments, norms, percentiles and a histogram of ``tensor`` (see the module docstring).

    Args:
        tensor: any tensor; int and bool tensors are converted, the maths runs in float64 on its device.
        per_channel: also summarize each slice along ``channel_dim`` (``Summary.channels``).
        channel_dim: the channel dimension, counted on the tensor as given: 1 for ``(N, C, ...)``,
            0 for one ``(C, H, W)`` image, -1 for channels-last features.
        bins: how many equal-width histogram bins.
        percentiles: the percentiles to report, each in [0, 100].

    Returns:
        A ``Summary``; with no finite value every statistic is NaN and the histogram empty.

    Raises:
        OptionError: ``bins`` is not a positive int, a percentile lies outside [0, 100], or
            ``channel_dim`` is out of range for the tensor.
    """
    values = _as_float64(tensor)
    _check_options(values, bins, percentiles, channel_dim if per_channel else None)
    flat = values.flatten()
    finite = flat[torch.isfinite(flat)]  # (n,)
    lo, hi = finite.aminmax() if finite.numel() else (torch.tensor(NAN), torch.tensor(NAN))
    return Summary(
        count=flat.numel(),
        mean=_item(finite.mean()) if finite.numel() else NAN,
        std=_item(finite.std(correction=0)) if finite.numel() else NAN,
        min=_item(lo),
        max=_item(hi),
        mean_abs=_item(finite.abs().mean()) if finite.numel() else NAN,
        l2=_item(torch.linalg.vector_norm(finite)) if finite.numel() else NAN,
        zero_fraction=_item((flat == 0).sum()) / flat.numel() if flat.numel() else NAN,
        nan_count=int(torch.isnan(flat).sum()),
        inf_count=int(torch.isinf(flat).sum()),
        percentiles=_percentiles(finite, percentiles),
        histogram=_histogram(finite, bins),
        channels=_channels(values, channel_dim) if per_channel else None,
    )


def _as_float64(tensor: Tensor) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise OptionError(f"summarize expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.is_complex():
        raise OptionError("summarize expects a real tensor, got a complex one; pass tensor.abs() or tensor.real")
    if tensor.device.type == "mps":  # MPS has no float64
        tensor = tensor.cpu()
    return tensor.detach().to(torch.float64)


def _check_options(values: Tensor, bins: int, percentiles: Sequence[float], channel_dim: int | None) -> None:
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise OptionError(f"bins must be a positive int, got {bins!r}")
    outside = [p for p in percentiles if not 0 <= p <= 100]
    if outside:
        raise OptionError(f"percentiles must lie in [0, 100], got {outside}")
    if channel_dim is not None and not -values.dim() <= channel_dim < values.dim():
        raise OptionError(
            f"channel_dim={channel_dim} is out of range for a tensor of shape {tuple(values.shape)}; "
            "use 1 for (N, C, ...), 0 for (C, H, W), -1 for channels-last"
        )


def _percentiles(finite: Tensor, percentiles: Sequence[float]) -> dict[float, float]:
    """Linear interpolation between order statistics, numpy's default method."""
    n = finite.numel()
    if not n or not percentiles:
        return dict.fromkeys(percentiles, NAN)
    ordered = torch.sort(finite).values  # (n,), ascending
    result = {}
    for p in percentiles:
        position = p / 100 * (n - 1)
        below = min(int(position), n - 1)
        a, b, t = _item(ordered[below]), _item(ordered[min(below + 1, n - 1)]), position - below
        result[p] = a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)  # numpy's _lerp
    return result


def _histogram(finite: Tensor, bins: int) -> Histogram:
    if not finite.numel():
        return Histogram([], [])
    lo, hi = (float(v) for v in finite.aminmax())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    step = (hi - lo) / bins  # edges as np.linspace makes them, bit for bit: i * step + lo, then the max
    edges = torch.arange(bins + 1, dtype=torch.float64, device=finite.device).mul_(step).add_(lo)
    edges[-1] = hi
    index = torch.bucketize(finite, edges[1:-1], right=True)  # edges[i] <= x < edges[i+1]; max in the last bin
    return Histogram(torch.bincount(index, minlength=bins).tolist(), edges.tolist())


def _channels(values: Tensor, dim: int) -> ChannelSummary:
    dim = dim % values.dim()
    channels = values.shape[dim]
    rows = values.movedim(dim, 0).reshape(channels, -1) if values.numel() else values.new_empty(channels, 0)
    finite = torch.isfinite(rows)  # (C, N)
    n = finite.sum(1)  # (C,)
    mean = torch.where(finite, rows, 0.0).sum(1) / n  # (C,), NaN where a channel has no finite value
    centred = torch.where(finite, rows - mean[:, None], 0.0)
    none = n == 0
    return ChannelSummary(
        dim=dim,
        mean=mean.tolist(),
        std=(centred.square().sum(1) / n).sqrt().tolist(),
        min=_reduce(rows, finite, torch.amin, math.inf).masked_fill(none, NAN).tolist(),
        max=_reduce(rows, finite, torch.amax, -math.inf).masked_fill(none, NAN).tolist(),
        mean_abs=(torch.where(finite, rows.abs(), 0.0).sum(1) / n).tolist(),
        zero_fraction=((rows == 0).sum(1) / rows.shape[1]).tolist(),
    )


def _reduce(rows: Tensor, finite: Tensor, reduce: Any, fill: float) -> Tensor:
    if not rows.shape[1]:  # amin/amax refuse an empty dimension
        return rows.new_full((rows.shape[0],), NAN)
    result: Tensor = reduce(torch.where(finite, rows, fill), dim=1)  # (C,)
    return result


def _item(value: Tensor) -> float:
    return float(value.item())


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): _plain(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
