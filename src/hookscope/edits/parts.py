"""Which part of a tensor an edit changes, and the out-of-place write there.

``channels=`` is dimension 1, ``positions=`` dimension 1 (integer indices into each call's tokens,
or a generation's ``"new"`` / ``"prompt"`` tokens, a slice or a bool mask: ``hookscope.edits.tokens``),
``units=`` the last dimension; at most one of them. ``put`` writes through ``torch.where``, never in
place, so the graph runs through the edited tensor and the caller's tensors stay as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import EditError
from .tokens import Span, Tokens
from .values import Where

Indices = int | Sequence[int] | Tensor
Positions = Indices | Span  # integer indices into each call's tokens, or "new" / "prompt" / a slice / a mask


@dataclass(frozen=True)
class Along:
    """Part of a tensor: ``indices`` along dimension ``dim`` (``what`` names it in messages)."""

    what: str
    dim: int
    indices: tuple[int, ...]


def along(channels: Indices | None, units: Indices | None, positions: Positions | None) -> Along | Tokens | None:
    """The part the keywords name: indices along one dimension, a generation's tokens, or None (all).

    Args:
        channels: indices along dimension 1; None for none.
        units: indices along the last dimension; None for none.
        positions: indices along dimension 1, or ``"new"`` / ``"prompt"`` / a slice / a bool mask.

    Returns:
        An ``Along``, ``Tokens`` (a generation's positions), or None when no keyword is given.

    Raises:
        EditError: more than one keyword given, or indices that are not integers.
    """
    if isinstance(positions, (str, slice)) or (isinstance(positions, Tensor) and positions.dtype == torch.bool):
        if channels is not None or units is not None:
            raise EditError("pass one of channels=, units=, positions= to an edit")
        return Tokens(positions)
    given = [
        (w, d, i)
        for w, d, i in (("channels", 1, channels), ("units", -1, units), ("positions", 1, positions))
        if i is not None
    ]
    if len(given) > 1:
        raise EditError(f"pass one of channels=, units=, positions= to an edit, got {', '.join(g[0] for g in given)}")
    if not given:
        return None
    what, dim, indices = given[0]
    flat = (
        indices.reshape(-1).tolist()
        if isinstance(indices, Tensor)
        else [indices]
        if isinstance(indices, int)
        else list(indices)
    )
    if not flat or not all(isinstance(i, int) for i in flat):
        raise EditError(f"{what}= takes integer indices, got {indices!r}")
    return Along(what, dim, tuple(flat))


def named(verb: str, part: Along | Tokens | None, *shown: Any) -> str:
    """How an edit shows itself: ``verb(shown..., channels=[3, 17])``.

    Args:
        verb: the helper's name.
        part: the part it changes; None for all.
        *shown: what else the name shows, in order (a factor, a source's type...).

    Returns:
        The name, as ``repr(op)`` shows it after ``edits.``.
    """
    args = [str(s) for s in shown]
    if isinstance(part, Tokens):
        args.append(f"positions={part}")
    elif part is not None:
        args.append(f"{part.what}={list(part.indices)}")
    return f"{verb}({', '.join(args)})"


def put(tensor: Tensor, new: Tensor, part: Along | Tokens | None, where: Where) -> Tensor:
    """``tensor`` with ``new`` (broadcast) where ``part`` says (everywhere without one), out of place.

    Args:
        tensor: the tensor edited (left as it was).
        new: the values put, broadcast to its shape.
        part: where they go; None for everywhere.
        where: the site, kind, key and call, for messages (and a generation's tokens).

    Returns:
        A new tensor, the graph running through both ``tensor`` and ``new``.

    Raises:
        EditError: indices out of range, or channels/units/positions on a tensor of fewer than 2 dims.
    """
    new = new.to(device=tensor.device, dtype=tensor.dtype)
    if part is None:
        return torch.where(torch.ones((), dtype=torch.bool, device=tensor.device), new, tensor)  # keeps the graph
    if isinstance(part, Tokens):
        picked = part.pick(tensor, where).to(tensor.device)  # (1 or B, T)
        return torch.where(picked.reshape(*picked.shape, *[1] * (tensor.dim() - 2)), new, tensor)
    if tensor.dim() < 2:
        raise EditError(f"{part.what}= needs a tensor of 2 or more dims at {where}, got shape {tuple(tensor.shape)}")
    size = tensor.shape[part.dim]
    wrong = [i for i in part.indices if not -size <= i < size]
    if wrong:
        raise EditError(
            f"{part.what} {wrong} out of range at {where}: dim {part.dim} has {size} (shape {tuple(tensor.shape)})"
        )
    mask = torch.zeros(size, dtype=torch.bool, device=tensor.device)
    mask[list(part.indices)] = True
    shape = [1] * tensor.dim()
    shape[part.dim] = size
    return torch.where(mask.reshape(shape), new, tensor)
