"""Running statistics of a stream of tensors, mergeable across batches, runs and processes.

``RunningStats`` is what a statistics-only extraction keeps per (layer, kind, key): it sees
each tensor once (``update``) and never holds it. Two of them merge (``merge``) into the
statistics of both streams, whatever way the data was split; that is how batches, resumed
runs and torchrun ranks are combined.

The rules, as ``hookscope.summarize`` has them (and checked against numpy on the
concatenated data):

- ``count`` is every element; NaN and ±Inf are counted (``nan_count``, ``inf_count``) and
  left out of everything else. ``zero_count`` counts exact zeros.
- Moments of the finite values: the count ``n``, ``mean`` and ``m2`` (sum of squared
  deviations, ``var = m2 / n``, ddof=0). Each tensor's moments are computed in two passes in
  float64 and merged with Chan, Golub and LeVeque's pairwise formula (Welford's update is its
  one-element case), so long streams do not lose precision to cancellation.
- ``min`` / ``max`` of the finite values; ``mean_abs``, the mean of |x|.
- ``channel_dim``: the same moments per channel (slices along that dimension, counted on the
  tensor as given: 1 for ``(N, C, ...)``, -1 for channels-last). The histogram is per layer only.
- The histogram counts finite values on one fixed grid, the same for every run, so histograms of
  different runs add up (``hookscope.stats.float_bins``); percentiles read from it would be
  approximate, so none are given.

Everything stays on the tensors' device, in float64; ``update`` waits for the device once, to
see whether every value is finite (then the moments need no masks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..core.records import Label
from ..errors import OptionError
from .float_bins import BINS, HALF, ascending, bin_keys, linear_histogram
from .moments import Moments, empty_moments, merge_moments, moments, moments_to

if TYPE_CHECKING:
    from PIL.Image import Image


class RunningStats(Shows):
    """Statistics of every tensor passed to ``update``, without keeping any (module docstring).

    Args:
        channel_dim: also keep moments per channel along this dimension (1 for ``(N, C, ...)``,
            -1 for channels-last); None keeps them for the whole tensor only.
    """

    def __init__(self, *, channel_dim: int | None = None) -> None:
        self.channel_dim = channel_dim
        self.shape: tuple[int, ...] | None = None  # of the first tensor seen
        self.dtype: str | None = None
        self.updates = 0
        self.counts = torch.zeros(4, dtype=torch.int64)  # count, nan_count, inf_count, zero_count
        self.all = empty_moments(1)
        self.channels: Moments | None = None
        self.hist = torch.zeros(BINS, dtype=torch.int64)

    def __repr__(self) -> str:
        return f"<RunningStats of {self.count:,} values: mean {self.mean:.4g}, std {self.std:.4g}>"

    def table(self) -> str:
        """A row per statistic of ``as_dict()`` (text).

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

    # -- the stream --------------------------------------------------------------------------
    def update(self, tensor: Tensor) -> RunningStats:
        """Add every element of ``tensor``; returns self.

        Args:
            tensor: any tensor; its values are read in float64 and not kept.

        Returns:
            This ``RunningStats``, updated (so calls chain).

        Raises:
            OptionError: with ``channel_dim``, the tensor lacks that dimension or has a different channel
                count than the tensors before it.
        """
        values = _as_float64(tensor)
        if self.shape is None:
            self.shape, self.dtype = tuple(tensor.shape), str(tensor.dtype).removeprefix("torch.")
        source = tensor.detach() if tensor.is_floating_point() else values
        by_key = bin_keys(source)
        inf_nan = by_key[HALF - 8 : HALF].sum() + by_key[-8:].sum()  # exponent 255
        small = by_key[0] + by_key[HALF]  # magnitudes below 2**-129: the zeros are among them
        nonfinite, tiny = torch.stack([inf_nan, small]).tolist()  # one wait for the device
        finite = nonfinite == 0
        none = torch.tensor(0, device=values.device)
        counts = torch.stack([
            torch.tensor(values.numel(), device=values.device),
            none if finite else source.isnan().sum(),
            none if finite else source.isinf().sum(),
            (source == 0).sum() if tiny else none,  # zeros sit in the two bins of magnitudes below 2**-129
        ])  # fmt: skip
        channels = self._channel_moments(values, finite)
        self._add(counts, moments(values, finite=finite), ascending(by_key), channels)
        self.updates += 1
        return self

    def merge(self, other: RunningStats) -> RunningStats:
        """A new ``RunningStats`` of both streams; neither is changed.

        Args:
            other: the statistics of another stream (another batch, run or rank), with the same ``channel_dim``.

        Returns:
            A new ``RunningStats`` equal to one that had seen both streams.

        Raises:
            OptionError: the two keep per-channel statistics along different dimensions, or of different
                channel counts.
        """
        if other.channel_dim != self.channel_dim:
            raise OptionError(
                f"cannot merge statistics per channel along dim {self.channel_dim} "
                f"with statistics along dim {other.channel_dim}"
            )
        merged = self.copy()
        merged._add(other.counts, other.all, other.hist, other.channels)
        merged.updates = self.updates + other.updates
        if merged.shape is None:
            merged.shape, merged.dtype = other.shape, other.dtype
        return merged

    def copy(self) -> RunningStats:
        """An independent copy (tensors are never changed in place, so they are shared).

        Returns:
            A new ``RunningStats``; updating either leaves the other as it was.
        """
        twin = RunningStats(channel_dim=self.channel_dim)
        twin.__dict__.update(self.__dict__)
        return twin

    def _add(self, counts: Tensor, all_: Moments, hist: Tensor, channels: Moments | None) -> None:
        device = counts.device
        self.counts = self.counts.to(device) + counts
        self.all = merge_moments(moments_to(self.all, device), all_)
        self.hist = self.hist.to(device) + hist.to(device)
        if channels is not None:
            mine = self.channels if self.channels is not None else empty_moments(len(channels.n), device)
            if len(mine.n) != len(channels.n):
                raise OptionError(
                    f"a tensor with {len(channels.n)} channels along dim {self.channel_dim} came after "
                    f"{len(mine.n)} channels; per-channel statistics need the same channels every time"
                )
            self.channels = merge_moments(moments_to(mine, device), moments_to(channels, device))

    def _channel_moments(self, values: Tensor, finite: bool) -> Moments | None:
        if self.channel_dim is None:
            return None
        if not -values.dim() <= self.channel_dim < values.dim():
            raise OptionError(
                f"per-channel statistics along dim {self.channel_dim} need a tensor with that dimension, "
                f"got shape {tuple(values.shape)}; use 1 for (N, C, ...), -1 for channels-last"
            )
        return moments(values, self.channel_dim, finite=finite)

    # -- numbers -----------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return int(self.counts[0])

    @property
    def nan_count(self) -> int:
        return int(self.counts[1])

    @property
    def inf_count(self) -> int:
        return int(self.counts[2])

    @property
    def zero_count(self) -> int:
        return int(self.counts[3])

    @property
    def n(self) -> int:
        """How many finite values the moments, extremes and histogram cover."""
        return int(self.all.n[0])

    @property
    def mean(self) -> float:
        return float(self.all.mean[0]) if self.n else math.nan

    @property
    def var(self) -> float:
        """Population variance (ddof=0)."""
        return float(self.all.var[0]) if self.n else math.nan

    @property
    def std(self) -> float:
        return math.sqrt(self.var)

    @property
    def min(self) -> float:
        return float(self.all.min[0]) if self.n else math.nan

    @property
    def max(self) -> float:
        return float(self.all.max[0]) if self.n else math.nan

    def as_dict(self, bins: int = 50) -> dict[str, Any]:
        """The keys of ``Summary.as_dict()``, for a report: NaN as None; no percentiles (see the module
        docstring); the histogram redrawn on ``bins`` equal bins from min to max, its counts
        spread evenly within each grid bin (fractional, so approximate).

        Args:
            bins: how many equal bins from min to max the histogram is redrawn on.

        Returns:
            ``count``, ``mean``, ``std``, ``min``, ``max``, ``mean_abs``, ``l2``, ``zero_fraction``,
            ``nan_count``, ``inf_count``, ``percentiles`` (empty) and ``histogram`` (``counts``, ``edges``).
        """
        n, mean, var = self.n, self.mean, self.var
        finite = n > 0
        counts, edges = linear_histogram(self.hist, self.min, self.max, bins) if finite else ([], [])
        summary = {
            "count": self.count,
            "mean": mean,
            "std": math.sqrt(var),
            "min": self.min,
            "max": self.max,
            "mean_abs": float(self.all.mean_abs[0]) if finite else math.nan,
            "l2": math.sqrt(float(self.all.m2[0]) + n * mean * mean) if finite else math.nan,
            "zero_fraction": self.zero_count / self.count if self.count else math.nan,
            "nan_count": self.nan_count,
            "inf_count": self.inf_count,
            "percentiles": {},
            "histogram": {"counts": counts, "edges": edges},
        }
        return {key: (v if not isinstance(v, float) or math.isfinite(v) else None) for key, v in summary.items()}

    # -- persistence (safetensors: plain tensors, no pickle) ----------------------------------
    def to_tensors(self) -> dict[str, Tensor]:
        """Everything as named CPU tensors; ``from_tensors`` reads them back exactly.

        Returns:
            Name -> tensor (``counts``, ``hist``, ``updates``, ``all.*``, and ``channels.*`` per channel).
        """
        named = {"counts": self.counts, "hist": self.hist, "updates": torch.tensor([self.updates])}
        named.update({f"all.{f.name}": getattr(self.all, f.name) for f in fields(Moments)})
        if self.channels is not None:
            named.update({f"channels.{f.name}": getattr(self.channels, f.name) for f in fields(Moments)})
        return {name: t.detach().cpu().contiguous() for name, t in named.items()}

    @classmethod
    def from_tensors(cls, named: dict[str, Tensor], *, channel_dim: int | None = None) -> RunningStats:
        """The statistics ``to_tensors`` wrote.

        Args:
            named: what ``to_tensors`` returned (``counts``, ``hist``, ``updates``, ``all.*``, ``channels.*``).
            channel_dim: the ``channel_dim`` the statistics were kept with.

        Returns:
            The ``RunningStats`` that wrote them, exactly.
        """
        stats = cls(channel_dim=channel_dim)
        stats.counts, stats.hist, stats.updates = named["counts"], named["hist"], int(named["updates"][0])
        stats.all = Moments(**{f.name: named[f"all.{f.name}"] for f in fields(Moments)})
        if "channels.n" in named:
            stats.channels = Moments(**{f.name: named[f"channels.{f.name}"] for f in fields(Moments)})
        return stats


def merge_tables(tables: Sequence[Mapping[Label, RunningStats]]) -> dict[Label, RunningStats]:
    """Label by label, the merge of every table, in order; labels in first-seen order."""
    merged: dict[Label, RunningStats] = {}
    for table in tables:
        for label, stats in table.items():
            merged[label] = merged[label].merge(stats) if label in merged else stats
    return merged


def _as_float64(tensor: Tensor) -> Tensor:
    """A float64 copy on the tensor's device (the CPU for MPS, which has no float64); real tensors only."""
    if not isinstance(tensor, Tensor) or tensor.is_complex():
        got = "a complex tensor" if isinstance(tensor, Tensor) else type(tensor).__name__
        raise OptionError(f"RunningStats.update expects a real torch.Tensor, got {got}; pass tensor.abs() for complex")
    device = torch.device("cpu") if tensor.device.type == "mps" else tensor.device
    return tensor.detach().to(device=device, dtype=torch.float64)
