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
``top_examples(k)``     per unit, the batch's ``k`` largest activations and where they are:
                        (B, C, *S) maps, (B, T, D) tokens or (B, D) rows -> (U, 3k + 4 + B) float64

``top_examples`` keeps O(units x (k + B)) numbers a batch in place of the batch's tensor; merging
every batch's top k gives the run's exact top k (``hookscope.probes.top``), and a resumed run
merges the batches it finds, so nothing is held between batches.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import OptionError, ShapeError

TensorFn = Callable[[Tensor], "Tensor | None"]


@dataclass(frozen=True)
class Reduction:
    """A named reduction of one tensor, called as ``reduce(site, kind, key, tensor)``.

    Attributes:
        name: what a store's manifest records (``spatial_mean()``).
        reduction: ``tensor -> tensor | None``: what is kept of a tensor (None keeps nothing).
    """

    name: str
    reduction: TensorFn

    def __call__(self, site: str, kind: str, key: str, tensor: Tensor) -> Tensor | None:
        return self.reduction(tensor)

    def __repr__(self) -> str:
        return self.name


def spatial_mean() -> Reduction:
    """``(B, C, *S) -> (B, C)``, the mean over every spatial position; tensors of 2 dims or fewer as they are.

    Returns:
        The ``Reduction``, for ``reduce=``.
    """
    return Reduction("spatial_mean()", lambda t: t.flatten(2).mean(dim=2) if t.dim() > 2 else t)


def first_rows(n: int) -> Reduction:
    """The first ``n`` rows (images) of the batch.

    Args:
        n: how many rows are kept, at least 1.

    Returns:
        The ``Reduction``, for ``reduce=``.

    Raises:
        OptionError: ``n`` is not a positive int.
    """
    _positive("first_rows", n)
    return Reduction(f"first_rows({n})", lambda t: t[:n] if t.dim() else t)


def top_channels(top_k: int = 5, **old: int) -> Reduction:
    """Per image, its ``top_k`` most active channels: ``(B, C, *S) -> (B, 2, top_k)``, values then indices.
    ``k=`` is the old name of ``top_k`` (deprecated).

    Args:
        top_k: how many channels per image, at least 1 (fewer when the tensor has fewer).
        **old: ``k=``, the deprecated name of ``top_k`` (warns).

    Returns:
        The ``Reduction``, for ``reduce=``.

    Raises:
        OptionError: ``top_k`` is not a positive int.
        ShapeError: when applied, a tensor has fewer than 2 dims.
    """
    k = _top_k("top_channels", top_k, old)
    _positive("top_channels", k)

    def reduce(t: Tensor) -> Tensor:
        if t.dim() < 2:
            raise ShapeError(f"top_channels needs (B, C, ...) tensors, got shape {tuple(t.shape)}")
        pooled = t.flatten(2).double().mean(dim=2) if t.dim() > 2 else t.double()  # (B, C)
        top = pooled.topk(min(k, pooled.shape[1]), dim=1)
        return torch.stack([top.values, top.indices.double()], dim=1)  # (B, 2, k)

    return Reduction(f"top_channels({k})", reduce)


GRID = 4  # columns of a top_examples table that say the positions' grid: dims, then up to 3 sizes


def top_examples(top_k: int = 9, **old: int) -> Reduction:
    """Per unit, the batch's ``k = top_k`` largest activations with their row and position, and each row's peak
    (9 by default, not the house's 5: a 3 x 3 grid of examples per unit, ``TopExamples.plot``).

    Units are dim 1 of ``(B, C, *S)`` maps (positions: the flattened ``S``), the last dim of (B, T, D)
    tokens (positions: ``T``) and dim 1 of (B, D) rows (one position). Returns (U, 3k + 4 + B), float64
    so that indices are exact: ``[:, :k]`` values (descending; NaN past the batch's size),
    ``[:, k:2k]`` rows and ``[:, 2k:3k]`` positions (-1 past it), ``[:, 3k:3k+4]`` the positions' grid
    (its number of dims, then up to 3 sizes, 0-padded: (2, H, W, 0) for maps, (1, T, 0, 0) for
    tokens), ``[:, 3k+4:]`` each row's largest value of the unit (what its histogram counts).
    ``k=`` is the old name of ``top_k`` (deprecated).

    Args:
        top_k: how many activations are kept per unit, at least 1.
        **old: ``k=``, the deprecated name of ``top_k`` (warns).

    Returns:
        The ``Reduction``, for ``reduce=`` (``hookscope.probes.top`` reads what it kept).

    Raises:
        OptionError: ``top_k`` is not a positive int.
    """
    k = _top_k("top_examples", top_k, old)
    _positive("top_examples", k)
    return Reduction(f"top_examples({k})", lambda t: batch_top(t, k))


def _top_k(name: str, top_k: int, old: dict[str, int]) -> int:
    """``top_k``, or the old ``k=`` with a ``DeprecationWarning`` (this leaf cannot import base.deprecation)."""
    unknown = sorted(set(old) - {"k"})
    if unknown:
        raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
    if "k" not in old:
        return top_k
    warnings.warn(f"{name}(k=...) is deprecated and will be removed in the next release; use {name}(top_k=...)",
                  DeprecationWarning, stacklevel=3)  # fmt: skip
    return old["k"]


def unit_positions(t: Tensor) -> Tensor:
    """(B, U, P): every activation of a unit by row and position (see ``top_examples``).

    Args:
        t: ``(B, C, *S)`` maps, ``(B, T, D)`` tokens or ``(B, D)`` rows.

    Returns:
        ``(B, U, P)`` with ``U`` units and ``P`` positions (``prod(S)``, ``T`` or 1).

    Raises:
        ShapeError: ``t`` has fewer than 2 dims.
    """
    if t.dim() < 2:
        raise ShapeError(f"top_examples needs (B, C, ...), (B, T, D) or (B, D) tensors, got shape {tuple(t.shape)}")
    if t.dim() == 3:
        return t.transpose(1, 2)  # (B, T, D) tokens -> (B, D, T)
    return t.reshape(t.shape[0], t.shape[1], -1)


def batch_top(t: Tensor, k: int) -> Tensor:
    """One batch's ``top_examples(k)`` table, (U, 3k + 4 + B) float64.

    Args:
        t: ``(B, C, *S)`` maps, ``(B, T, D)`` tokens or ``(B, D)`` rows.
        k: how many activations are kept per unit.

    Returns:
        ``(U, 3k + 4 + B)`` float64 (the layout of ``top_examples``).

    Raises:
        ShapeError: ``t`` has fewer than 2 dims.
    """
    values = unit_positions(t.detach()).float()  # (B, U, P)
    rows, units, positions = values.shape
    flat = values.permute(1, 0, 2).reshape(units, rows * positions)  # (U, B * P), row-major: row, then position
    top = flat.topk(min(k, rows * positions), dim=1)  # (U, k')
    table = torch.full((units, 3 * k + GRID + rows), float("nan"), dtype=torch.float64, device=t.device)
    kept = top.values.shape[1]
    table[:, k : 3 * k] = -1.0
    table[:, :kept] = top.values.double()
    table[:, k : k + kept] = torch.div(top.indices, positions, rounding_mode="floor").double()
    table[:, 2 * k : 2 * k + kept] = (top.indices % positions).double()
    grid = [] if t.dim() == 2 else [t.shape[1]] if t.dim() == 3 else list(t.shape[2:])
    table[:, 3 * k : 3 * k + GRID] = torch.tensor([len(grid), *grid, 0, 0, 0][:GRID], dtype=torch.float64)
    table[:, 3 * k + GRID :] = values.amax(dim=2).T.double()  # (U, B)
    return table


def cast(dtype: torch.dtype) -> Reduction:
    """Floating tensors to ``dtype`` (``torch.bfloat16`` halves what is written); others untouched.

    Args:
        dtype: a floating torch dtype (``torch.bfloat16``, ``torch.float16``).

    Returns:
        The ``Reduction``, for ``reduce=``.

    Raises:
        OptionError: ``dtype`` is not a floating torch dtype.
    """
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise OptionError(f"cast needs a floating torch dtype such as torch.float16, got {dtype!r}")
    name = str(dtype).removeprefix("torch.")
    return Reduction(f"cast({name})", lambda t: t.to(dtype) if t.is_floating_point() else t)


def chain(*reducers: Reduction) -> Reduction:
    """Each reducer in turn; one that keeps nothing (None) ends the chain.

    Args:
        *reducers: ``Reduction`` objects, applied first to last.

    Returns:
        One ``Reduction`` named ``a -> b -> ...``.
    """

    def reduce(t: Tensor) -> Tensor | None:
        kept: Tensor | None = t
        for reducer in reducers:
            if kept is None:
                return None
            kept = reducer.reduction(kept)
        return kept

    return Reduction(" -> ".join(r.name for r in reducers), reduce)


def reducer_name(reduce: object) -> str | None:
    """What a manifest records of a ``reduce=`` argument: a Reduction's name, a function's qualified name.

    Args:
        reduce: a ``Reduction``, any callable, or None.

    Returns:
        The reduction's name, ``callable:module.qualname`` for another callable, None for None.
    """
    if reduce is None:
        return None
    if isinstance(reduce, Reduction):
        return reduce.name
    return f"callable:{getattr(reduce, '__module__', '?')}.{getattr(reduce, '__qualname__', type(reduce).__name__)}"


def _positive(what: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise OptionError(f"{what} needs a positive int, got {n!r}")
