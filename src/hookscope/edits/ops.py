"""The edits themselves: small objects that turn a tensor into its edited copy, never in place.

::

    edits.zero(channels=[3, 17])            (N, C, ...) channels 3 and 17 set to 0
    edits.zero(units=[5])                   the last dimension's unit 5 (a Linear's feature)
    edits.zero(positions=[0])               (B, T, ...) token 0
    edits.mean(stats)                       replaced by a mean: a RunningStats, a store's statistics,
                                            a tensor, or (no source) the batch's own mean
    edits.scale(0.5), edits.clamp(min=0)    elementwise
    edits.add(vector)                       a vector broadcast over the other dims (steering)
    edits.add(v, positions="new")           at the tokens model.generate adds only, with or without
                                            the KV cache (``hookscope.edits.tokens``); match_norm=True: v * |x|
    edits.project_out(direction)            the component along a direction removed (a probe's, (*S) or (k, *S))
    edits.replace(clean_capture)            the values another run had at the same site, key and call
    edits.function(fn)                      any ``fn(tensor, call) -> tensor`` (a plain function works too)

Every helper takes ``kind=`` (``output``, the default; ``input``, what the module receives;
``grad_output``, the gradient flowing back into the module's output), ``key=`` (which tensor of a
structured value: ``out[0]``, ``out.last_hidden_state``, ``args[1]``, ``kwargs.mask``; needed
when the value holds several) and ``call=`` (one call of a module that runs several times;
None: every call). ``channels`` is dimension 1, ``positions`` dimension 1 (batch-first tokens:
integer indices into each call's tokens, or a generation's ``"new"`` / ``"prompt"`` tokens, a
slice or a bool mask of its positions), ``units`` the last dimension. The edited tensor is always
a new one: the graph runs through it (``torch.where``, never an in-place write), so gradients flow
and the caller's tensors stay as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import EditError
from ..stats.streaming import RunningStats
from .edit_op import EditKind, EditOp, UserFunction, make
from .parts import Indices, Positions, along, named, put
from .values import Where, laid_along, mean_of, projected_out, value_of


def zero(
    *,
    channels: Indices | None = None,
    units: Indices | None = None,
    positions: Positions | None = None,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Set to 0 everything, or the ``channels`` (dim 1), ``units`` (last dim) or ``positions`` (dim 1).

    Args:
        channels: indices along dimension 1 (channels of ``(N, C, ...)`` maps); None for all.
        units: indices along the last dimension (a Linear's features); None for all.
        positions: indices along dimension 1 of ``(B, T, ...)`` tokens, or of a generation's sequence
            ``"new"``, ``"prompt"``, a slice or a bool mask (``hookscope.edits.tokens``); None for all.
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or more than one of channels, units, positions.
    """
    part = along(channels, units, positions)
    return make(
        named("zero", part),
        lambda t, w: put(t, torch.zeros((), dtype=t.dtype), part, w),
        kind,
        key,
        call,
        zeroes=True,
        part=part,
    )


def mean(
    source: RunningStats | Mapping[Any, RunningStats] | Tensor | Any | None = None,
    *,
    channels: Indices | None = None,
    units: Indices | None = None,
    positions: Positions | None = None,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Replace by a mean (mean ablation): of a ``RunningStats`` (per channel when it has them), of a
    store's statistics (a ``Run``, or ``run.statistics()``: the site's own), a tensor, or with no
    source the mean over the batch (dim 0) of the tensor itself.

    Args:
        source: a ``RunningStats`` (per channel when it has them), a ``Run`` or its ``statistics()``
            (the site's own), a tensor broadcast to the shape, or None for the batch's own mean (dim 0).
        channels: indices along dimension 1 (channels of ``(N, C, ...)`` maps); None for all.
        units: indices along the last dimension (a Linear's features); None for all.
        positions: indices along dimension 1 of ``(B, T, ...)`` tokens, or of a generation's sequence
            ``"new"``, ``"prompt"``, a slice or a bool mask (``hookscope.edits.tokens``); None for all.
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or more than one of channels,
            units, positions (a source that does not fit raises when the edit is applied).
    """
    part = along(channels, units, positions)

    def change(tensor: Tensor, where: Where) -> Tensor:
        return put(tensor, mean_of(source, tensor, where), part, where)

    shown = "batch" if source is None else type(source).__name__
    return make(named("mean", part, shown), change, kind, key, call, part=part)


def scale(
    factor: float | Tensor,
    *,
    channels: Indices | None = None,
    units: Indices | None = None,
    positions: Positions | None = None,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Multiply by ``factor`` (all, or the channels / units / positions given).

    Args:
        factor: a number, or a tensor broadcast to the shape.
        channels: indices along dimension 1 (channels of ``(N, C, ...)`` maps); None for all.
        units: indices along the last dimension (a Linear's features); None for all.
        positions: indices along dimension 1 of ``(B, T, ...)`` tokens, or of a generation's sequence
            ``"new"``, ``"prompt"``, a slice or a bool mask (``hookscope.edits.tokens``); None for all.
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or more than one of channels, units, positions.
    """
    part = along(channels, units, positions)
    return make(named("scale", part, factor), lambda t, w: put(t, t * factor, part, w), kind, key, call, part=part)


def add(
    vector: Tensor | float,
    *,
    dim: int | None = None,
    positions: Positions | None = None,
    match_norm: bool = False,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Add ``vector``, broadcast over the other dims: a (D,) vector lies along ``dim`` (default: the
    last dimension, or dim 1 when only that one has its length); ``positions`` adds at those tokens only.

    Steering a generation: ``positions="new"`` adds at the tokens ``model.generate`` adds, never at the
    prompt's, with or without the KV cache (``hookscope.edits.tokens``); ``match_norm=True`` adds
    ``vector * |x|`` at each token, ``|x|`` the norm of the tensor's token along ``dim`` (a unit
    direction times 0.5 adds half the residual's norm).

    Args:
        vector: a number, or a ``(D,)`` vector (the steering direction).
        dim: the dimension the vector lies along; None: the last one, or dim 1 when only that one has its length.
        positions: add at these indices along dimension 1 only, or at a generation's ``"new"`` or
            ``"prompt"`` tokens, a slice or a bool mask of its positions; None adds everywhere.
        match_norm: scale the vector by the norm of each token it is added to (a ``(D,)`` vector only).
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, bad positions, ``match_norm``
            without a ``(D,)`` vector.
    """
    part = along(None, None, positions)
    if match_norm and not (isinstance(vector, Tensor) and vector.dim() == 1):
        raise EditError(f"edits.add(match_norm=True) needs a (D,) vector, got {_short(vector)}")

    def change(tensor: Tensor, where: Where) -> Tensor:
        laid = laid_along(vector, tensor, dim, where)
        if match_norm:
            along = [d for d, n in enumerate(laid.shape) if n > 1] or [tensor.dim() - 1]
            laid = laid.to(tensor.device) * tensor.norm(dim=along[0], keepdim=True)
        return put(tensor, tensor + laid.to(tensor.device), part, where)

    shown = (_short(vector), "match_norm=True") if match_norm else (_short(vector),)
    return make(named("add", part, *shown), change, kind, key, call, part=part)


def project_out(
    direction: Tensor,
    *,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Remove the component along ``direction``: shaped like the tensor's trailing dims (a (D,) vector
    of tokens, a (C, H, W) map of images), or ``(k, *those)`` to remove the span of k directions.

    Args:
        direction: shaped like the tensor's trailing dims (a ``(D,)`` vector, a ``(C, H, W)`` map), or
            ``(k, *those)`` to remove the span of k directions.
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or ``direction`` is not a non-empty tensor.
    """
    if not isinstance(direction, Tensor) or direction.numel() == 0:
        raise EditError(f"edits.project_out needs a non-empty tensor direction, got {type(direction).__name__}")
    return make(f"project_out({_short(direction)})", lambda t, w: projected_out(direction, t, w), kind, key, call)


def replace(
    value: Tensor | Mapping[str, Any],
    *,
    channels: Indices | None = None,
    units: Indices | None = None,
    positions: Positions | None = None,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Replace by ``value``: a tensor (broadcast to the shape), or a ``Capture`` or ``Run`` whose same
    site, kind, key and call are taken (patching); the channels / units / positions given only.

    Args:
        value: a tensor broadcast to the shape, or a ``Capture`` or ``Run`` whose same site, kind,
            key and call are taken.
        channels: indices along dimension 1 (channels of ``(N, C, ...)`` maps); None for all.
        units: indices along the last dimension (a Linear's features); None for all.
        positions: indices along dimension 1 of ``(B, T, ...)`` tokens, or of a generation's sequence
            ``"new"``, ``"prompt"``, a slice or a bool mask (``hookscope.edits.tokens``); None for all.
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or more than one of channels, units, positions.
    """
    part = along(channels, units, positions)

    def change(tensor: Tensor, where: Where) -> Tensor:
        return put(tensor, value_of(value, tensor, where), part, where)

    return make(named("replace", part, _short(value)), change, kind, key, call, part=part)


def clamp(
    min: float | None = None,
    max: float | None = None,
    *,
    kind: EditKind = "output",
    key: str | None = None,
    call: int | None = None,
) -> EditOp:
    """Clamp into ``[min, max]`` (either may be None).

    Args:
        min: the lower bound; None for none.
        max: the upper bound; None for none.
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or neither ``min`` nor ``max``.
    """
    if min is None and max is None:
        raise EditError("edits.clamp needs min=, max= or both")
    return make(f"clamp(min={min}, max={max})", lambda t, w: t.clamp(min=min, max=max), kind, key, call)


def function(fn: UserFunction, *, kind: EditKind = "output", key: str | None = None, call: int | None = None) -> EditOp:
    """Any ``fn(tensor, call) -> tensor`` of the same shape (``call``: the index of the module's call).

    Args:
        fn: ``fn(tensor, call) -> tensor`` returning a new tensor of the same shape (``call`` is the
            index of the module's call).
        kind: what is edited: ``output`` (the default), ``input`` (what the module receives) or
            ``grad_output`` (the gradient flowing back into its output).
        key: which tensor of a structured value (``out[0]``, ``args[1]``, ``kwargs.mask``); None when it holds one.
        call: the one call edited, 0-based; None edits every call.

    Returns:
        The ``EditOp``, for ``hookscope.edit(model, {selector: op})``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, or ``fn`` is not callable.
    """
    if not callable(fn):
        raise EditError(f"edits.function needs a function (tensor, call) -> tensor, got {type(fn).__name__}")
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return make(f"function({name})", lambda t, w: fn(t, w.call), kind, key, call)


def as_op(value: EditOp | UserFunction) -> EditOp:
    """An ``EditOp`` as it is; a plain function as ``function(fn)``; anything else is an error."""
    if isinstance(value, EditOp):
        return value
    if callable(value):
        return function(value)
    raise EditError(f"an edit is an edits.* helper or a function (tensor, call) -> tensor, got {type(value).__name__}")


# -- pieces ------------------------------------------------------------------------------------
def _short(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"tensor{tuple(value.shape)}" if value.dim() else f"{value.item():g}"
    return type(value).__name__ if isinstance(value, Mapping) else repr(value)
