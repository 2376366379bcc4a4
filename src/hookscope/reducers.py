"""Ready-made ``reduce=`` functions: keep less of each tensor than the whole of it.

Each builds a ``Reduction``, a reducer ``(site, kind, key, tensor) -> tensor | None`` for ``capture`` and
``extract``; ``chain`` applies several in turn. They are named, and the name is what a store's
manifest records (``spatial_mean()``, ``first_rows(4) -> cast(bfloat16)``).

``spatial_mean()``      (B, C, *S) -> (B, C): the mean over every position (2-D tensors kept)
``first_rows(n)``       the first ``n`` rows of the batch: (B, ...) -> (min(n, B), ...)
``top_channels(k)``     (B, C, *S) -> (B, 2, k): per image, the spatial means of its ``k`` largest
                        channels (``[:, 0]``, descending) and their channel indices (``[:, 1]``),
                        in float64 so the indices are exact; cast before it, never after
``cast(dtype)``         floating tensors to ``dtype`` (integer ones untouched)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import OptionError, ShapeError

TensorFn = Callable[[Tensor], "Tensor | None"]


@dataclass(frozen=True)
class Reduction:
    """A named reduction of one tensor, called as ``reduce(site, kind, key, tensor)``."""

    name: str
    reduction: TensorFn

    def __call__(self, site: str, kind: str, key: str, tensor: Tensor) -> Tensor | None:
        return self.reduction(tensor)

    def __repr__(self) -> str:
        return self.name


def spatial_mean() -> Reduction:
    """(B, C, *S) -> (B, C), the mean over every spatial position; tensors of 2 dims or fewer as they are."""
    return Reduction("spatial_mean()", lambda t: t.flatten(2).mean(dim=2) if t.dim() > 2 else t)


def first_rows(n: int) -> Reduction:
    """The first ``n`` rows (images) of the batch."""
    _positive("first_rows", n)
    return Reduction(f"first_rows({n})", lambda t: t[:n] if t.dim() else t)


def top_channels(k: int) -> Reduction:
    """Per image, its ``k`` most active channels: (B, C, *S) -> (B, 2, k), values then indices."""
    _positive("top_channels", k)

    def reduce(t: Tensor) -> Tensor:
        if t.dim() < 2:
            raise ShapeError(f"top_channels needs (B, C, ...) tensors, got shape {tuple(t.shape)}")
        pooled = t.flatten(2).double().mean(dim=2) if t.dim() > 2 else t.double()  # (B, C)
        top = pooled.topk(min(k, pooled.shape[1]), dim=1)
        return torch.stack([top.values, top.indices.double()], dim=1)  # (B, 2, k)

    return Reduction(f"top_channels({k})", reduce)


def cast(dtype: torch.dtype) -> Reduction:
    """Floating tensors to ``dtype`` (``torch.bfloat16`` halves what is written); others untouched."""
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise OptionError(f"cast needs a floating torch dtype such as torch.float16, got {dtype!r}")
    name = str(dtype).removeprefix("torch.")
    return Reduction(f"cast({name})", lambda t: t.to(dtype) if t.is_floating_point() else t)


def chain(*reducers: Reduction) -> Reduction:
    """Each reducer in turn; one that keeps nothing (None) ends the chain."""

    def reduce(t: Tensor) -> Tensor | None:
        kept: Tensor | None = t
        for reducer in reducers:
            if kept is None:
                return None
            kept = reducer.reduction(kept)
        return kept

    return Reduction(" -> ".join(r.name for r in reducers), reduce)


def reducer_name(reduce: object) -> str | None:
    """What a manifest records of a ``reduce=`` argument: a Reduction's name, a function's qualified name."""
    if reduce is None:
        return None
    if isinstance(reduce, Reduction):
        return reduce.name
    return f"callable:{getattr(reduce, '__module__', '?')}.{getattr(reduce, '__qualname__', type(reduce).__name__)}"


def _positive(what: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise OptionError(f"{what} needs a positive int, got {n!r}")
