"""What a capture holds: one ``Record`` per site (module or tap), one ``Call`` per call.

A call holds its tensors by kind and key (``call.tensors[kind][key]``); the kinds are the rows of
``hookscope.core.kinds`` (``input``, ``output``, ``grad_input``, ``grad_output`` per call;
``param_grad`` per site, in ``Record.param_grads``).

A tap (``Capture.tap``) is a site whose ``output`` is the tapped tensor (key ``value``) and
whose ``grad_output`` is its gradient; ``.value`` and ``.grad`` are the same two things.

Shortcuts (``.input``, ``.output``, ``.grad_input``, ``.grad_output``, ``.value``, ``.grad``)
return the value *in the module's own structure* (``value_of``): a tensor for a module that
returned a tensor, the same tuple, dict, namedtuple, dataclass or ``ModelOutput`` for one that
returned that (``hookscope.core.tree.rebuild`` says what happens to a class that cannot be
rebuilt), with its non-tensor leaves as returned. ``.input`` is the one argument when the module
was called with one positional argument and no keyword, else ``Arguments(args, kwargs)``.
A gradient kind has the same structure, with None where a tensor received no gradient.
The flat, keyed access stays: ``call.keys(kind)``, ``call.get(kind, key)`` (the first tensor
without a key), ``record.values(kind, key)`` and ``record.stack(kind, key)``.

A call is a *logical* call: activation checkpointing's recomputation of it is not another one
(``hookscope.core.phase``). On a ``Record`` the shortcuts are defined only when the site ran exactly once; a site called
several times raises ``AmbiguousCallError`` instead of silently picking a call: use ``.calls[k]``,
``.values(kind)`` or ``.stack(kind)``. A gradient that reached a tensor in several backward
passes through the same call is summed, as ``Tensor.grad`` would be.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..errors import AmbiguousCallError, NotCapturedError
from . import kinds
from .kinds import Kind
from .tree import Arguments, Layout, Leaf, Node, rebuild

if TYPE_CHECKING:
    from PIL.Image import Image

Label = tuple[str, str, str]  # (site, kind, key): where a kept tensor came from


class _Shortcut:
    """``site.output`` and friends: ``site.value_of(kind)``."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    @overload
    def __get__(self, obj: None, owner: type) -> _Shortcut: ...
    @overload
    def __get__(self, obj: _Shortcuts, owner: type) -> Any: ...
    def __get__(self, obj: _Shortcuts | None, owner: type) -> Any:
        return self if obj is None else obj.value_of(self.kind)


class _Shortcuts:
    """The shortcuts shared by ``Call`` and ``Record``: each kind's value, in its structure."""

    input = _Shortcut("input")
    output = _Shortcut("output")
    grad_input = _Shortcut("grad_input")
    grad_output = _Shortcut("grad_output")
    value = output  # a tap's tensor
    grad = grad_output  # a tap's gradient

    def value_of(self, kind: Kind) -> Any:
        raise NotImplementedError


class SitesPlot:
    """``.plot()`` of a mapping of sites (a ``Capture``, a store's ``Run``)."""

    def plot(self, *, kind: Kind | None = None) -> Image:
        """The gradient flow of a gradient ``kind``, else a histogram per site (None: ``grad_output`` where
        held, else ``output``), a PIL image (``hookscope.report.tables.sites_plot``).

        Args:
            kind: the kind drawn; None is ``grad_output`` where held, else ``output``.

        Returns:
            A PIL image.

        Raises:
            OptionError: no site holds ``kind``.
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        return plot_of(self, kind=kind)


class Call(_Shortcuts, Shows):
    """One call of a site: the tensors of each kind, by key, and why any kind is empty.

    ``tensors`` (kind -> key -> tensor), ``missing`` (kind -> why it holds nothing), ``watched``
    (grad kind -> keys with a hook) and ``reached`` (grad kinds a backward pass delivered) are made
    when first read or written: a hook builds a record per call, and most calls fill one of them.
    The unset attributes are read from the class (a plain class: cheaper to build than a dataclass
    or a slotted one, in the hot path of every hooked call).

    Args:
        site: the name of the site (module or tap) that was called.
        index: the k-th call of this site inside the capture (0 first).
        tensors: kind -> key -> stored tensor; None starts empty.
        missing: kind -> why that kind holds nothing; None starts empty.
        watched: gradient kind -> the keys whose gradient is hooked; None starts empty.
        reached: the gradient kinds a backward pass delivered; None starts empty.
        order: the call's position among all calls of the capture, in the order they returned (-1: unknown).
        error: ``"Type: message"`` of the exception the module's forward raised, or None.
        layouts: kind -> the structure (tuple, dict, ...) its tensors sat in; None when each was one tensor.
    """

    order: int = -1  # position among all calls of the capture, in the order they returned
    error: str | None = None  # the exception the module's forward raised, if it did
    layouts: dict[str, Layout] | None = None  # kind -> the structure its tensors sat in; None: one tensor
    _tensors: dict[str, dict[str, Tensor]] | None = None  # the containers, made when first used
    _one: tuple[Kind, Tensor | None] | None = None  # (kind, kept) of a call that returned one tensor: see tensors
    _missing: dict[str, str] | None = None
    _watched: dict[str, list[str]] | None = None
    _reached: set[str] | None = None

    def __init__(
        self,
        site: str,
        index: int,  # k-th call of this site inside the capture
        tensors: dict[str, dict[str, Tensor]] | None = None,
        missing: dict[str, str] | None = None,
        watched: dict[str, list[str]] | None = None,
        reached: set[str] | None = None,
        order: int = -1,
        error: str | None = None,
        layouts: dict[str, Layout] | None = None,
    ) -> None:
        self.site = site
        self.index = index
        if tensors is not None:
            self._tensors = tensors
        if order != -1:
            self.order = order
        if missing is not None or watched is not None or reached is not None:
            self._missing, self._watched, self._reached = missing, watched, reached
        if error is not None or layouts is not None:
            self.error, self.layouts = error, layouts

    @property
    def tensors(self) -> dict[str, dict[str, Tensor]]:
        if self._tensors is None:
            self._tensors = {} if self._one is None else _one_kind(*self._one)
        return self._tensors

    def kept(self) -> list[Tensor]:
        """Every tensor this call holds, without building its containers (what ``clear()`` hands back).

        Returns:
            The stored tensors of every kind and key.
        """
        if self._tensors is None:
            return [] if self._one is None or self._one[1] is None else [self._one[1]]
        return [t for held in self._tensors.values() for t in held.values()]

    @property
    def missing(self) -> dict[str, str]:
        if self._missing is None:
            self._missing = {}
        return self._missing

    @property
    def watched(self) -> dict[str, list[str]]:
        if self._watched is None:
            self._watched = {}
        return self._watched

    @property
    def reached(self) -> set[str]:
        if self._reached is None:
            self._reached = set()
        return self._reached

    def __repr__(self) -> str:
        held = "; ".join(f"{kind} {_describe(tensors)}" for kind, tensors in self.tensors.items())
        failed = f", raised {self.error}" if self.error else ""
        return f"<Call {self.site!r} #{self.index}: {held or 'nothing held'}{failed}>"

    def plot(self, *, kind: Kind | None = None, channels: int = 16) -> Image:
        """Image 0's first ``channels`` maps of ``kind`` (default: the first kind held, output first), a grid.

        Args:
            kind: the kind drawn; None takes the first kind held, ``output`` first.
            channels: how many maps (channels) of image 0 the grid shows.

        Returns:
            A PIL image, the feature grid.

        Raises:
            MissingDependencyError: Pillow or matplotlib is not installed.
        """
        image: Image = plot_of(self, kind=kind, channels=channels)
        return image

    def keys(self, kind: Kind) -> list[str]:
        """The keys held for ``kind``, in layout order.

        Args:
            kind: the kind asked for (``output``, ``grad_input``, ...).

        Returns:
            The keys (``"out"``, ``"args[0]"``, ``"kwargs.mask"``, ...) that hold a tensor; empty when none.
        """
        held = self.tensors.get(kind, {})
        return [k for k in self.watched.get(kind, held) if k in held]

    def get(self, kind: Kind, key: str | None = None) -> Tensor:
        """The tensor of ``kind`` at ``key``; without a key, the first one (see module doc).

        Args:
            kind: the kind asked for.
            key: the leaf's key in the module's structure (``"out"``, ``"args[0]"``, ``"[1]"``...); None
                takes the first one.

        Returns:
            The stored tensor.

        Raises:
            NotCapturedError: nothing is held for ``kind`` (or at ``key``); the message says why (not
                captured, no backward pass yet, no grad mode...).
        """
        held = self.tensors.get(kind, {})
        if key is None:
            layout = self.watched.get(kind) or list(held)
            if not layout:
                raise NotCapturedError(self._why(kind))
            key = layout[0]
        if key not in held:
            raise NotCapturedError(self._why(kind, key))
        return held[key]

    def _why(self, kind: str, key: str | None = None) -> str:
        where = f"{self.site!r} (call {self.index})" + (f" at {key!r}" if key else "")
        reason = self.missing.get(kind)
        if reason:
            return f"no {kind} for {where}: {reason}"
        held = self.tensors.get(kind)
        if held is not None and key is not None:
            return f"no {kind} for {where}; keys held: {', '.join(held) or 'none'}"
        if kinds.is_gradient(kind) and kind in self.watched:
            return f"no {kind} for {where} yet: no backward pass has reached it"
        return f"no {kind} for {where}: it was not captured; pass kinds=(..., {kind!r}) to hookscope.capture"

    def set_layout(self, kinds: tuple[str, ...], layout: Layout) -> None:
        """Remember the structure the tensors of ``kinds`` sat in, so ``value_of`` can rebuild it.

        Args:
            kinds: the kinds whose tensors sat in ``layout`` (those of one hook point).
            layout: the structure (``hookscope.core.tree``); a bare tensor's ``Leaf`` is not stored.
        """
        if kinds and not isinstance(layout, Leaf):  # a bare tensor needs no layout
            if self.layouts is None:
                self.layouts = {}
            for kind in kinds:
                self.layouts[kind] = layout

    def first(self, kind: Kind) -> Tensor:
        """The first tensor of ``kind``, in layout order (``get(kind)``).

        Args:
            kind: the kind asked for.

        Returns:
            The first stored tensor of ``kind``.

        Raises:
            NotCapturedError: nothing is held for ``kind``.
        """
        return self.get(kind)

    def value_of(self, kind: Kind) -> Any:
        """``kind`` as the module had it: its tensors put back in their structure (see module doc).

        Args:
            kind: the kind asked for.

        Returns:
            A tensor for a module that had one tensor; otherwise the tuple, dict, dataclass or
            ``Arguments(args, kwargs)`` rebuilt around the stored tensors (None where one got no gradient).

        Raises:
            NotCapturedError: nothing is held for ``kind``.
        """
        layout = self.layouts.get(kind) if self.layouts else None
        held = self.tensors.get(kind)
        if layout is None or (not held and _has_tensors(layout)):
            return self.get(kind)  # a plain tensor, or the error that says why there is none
        value = rebuild(layout, held or {})
        if type(value) is Arguments and len(value.args) == 1 and not value.kwargs:
            return value.args[0]  # one positional argument: the friendly answer is the argument itself
        return value

    def sole(self, kind: Kind) -> Tensor:
        """The one tensor of ``kind``; a clear error when the value holds several (pass a key).

        Args:
            kind: the kind asked for.

        Returns:
            The single tensor of ``kind``.

        Raises:
            AmbiguousCallError: ``kind`` holds several tensors; pass a key to ``get``.
            NotCapturedError: nothing is held for ``kind``.
        """
        keys = self.keys(kind)
        if len(keys) > 1:
            raise AmbiguousCallError(
                f"{kind} of {self.site!r} (call {self.index}) holds {len(keys)} tensors ({', '.join(keys[:4])}"
                f"{', ...' if len(keys) > 4 else ''}); pass key=, e.g. key={keys[0]!r}"
            )
        return self.get(kind)


@dataclass(eq=False)
class Record(_Shortcuts, Shows):
    """Everything captured at one site (a module or a tap), across all of its calls.

    Attributes:
        name: the site's dotted module name, or the tap's name.
        type: the module's class name, or ``"tap"``.
        kinds: the kinds the capture keeps here.
        calls: one ``Call`` per call of the site, in call order.
        param_grads: parameter name -> its gradient after each backward pass (``param_grad``).
        missing: site-wide reasons something is absent (``"param_grad"``, ``"call"``).
        channels: the module's output channels as its weight says (tells ``(B, H, W, C)`` maps
            apart), or None.
    """

    name: str
    type: str  # the module's class name, or "tap"
    kinds: tuple[Kind, ...]
    calls: list[Call] = field(default_factory=list)
    param_grads: dict[str, list[Tensor]] = field(default_factory=dict)  # name -> one per backward pass
    missing: dict[str, str] = field(default_factory=dict)  # site-wide reasons (param_grad, no call)
    channels: int | None = None  # the module's output channels as its weight says: tells (B, H, W, C) maps

    def __repr__(self) -> str:
        return f"<Record {self.name!r} ({self.type}): {len(self.calls)} call(s), kinds={self.kinds}>"

    def table(self) -> str:
        """A row per call: the shape of each kind held, the mean and std of the first (text).

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, *, call: int = 0, kind: Kind | None = None, channels: int = 16) -> Image:
        """The feature grid of call ``call`` (see ``Call.plot``).

        Args:
            call: which call (0: the first).
            kind: the kind drawn; None takes the first kind held, ``output`` first.
            channels: how many maps of image 0 the grid shows.

        Returns:
            A PIL image, the feature grid.

        Raises:
            MissingDependencyError: Pillow or matplotlib is not installed.
        """
        image: Image = plot_of(self, call=call, kind=kind, channels=channels)
        return image

    def values(self, kind: Kind = "output", key: str | None = None) -> list[Any]:
        """``kind`` from every call, in call order: the tensor at ``key``, or without one the value in
        its structure (``call.value_of(kind)``).

        Args:
            kind: the kind asked for (default ``output``).
            key: a leaf's key; None gives each call's whole value in its structure.

        Returns:
            One value per call, in call order.

        Raises:
            NotCapturedError: a call holds nothing for ``kind`` (or at ``key``).
        """
        return [call.get(kind, key) if key is not None else call.value_of(kind) for call in self.calls]

    def stack(self, kind: Kind = "output", key: str | None = None, dim: int = 0) -> Tensor:
        """The tensor of ``kind`` at ``key`` from every call, stacked along a new dimension ``dim``;
        without a key, the kind must hold one tensor per call.

        Args:
            kind: the kind asked for (default ``output``).
            key: a leaf's key; None requires one tensor per call.
            dim: where the new call dimension goes (``torch.stack``'s ``dim``).

        Returns:
            The tensors stacked, shape ``(calls, *shape)`` for ``dim=0``.

        Raises:
            AmbiguousCallError: without a key, a call holds several tensors of ``kind``.
            NotCapturedError: a call holds nothing for ``kind`` (or at ``key``).
        """
        tensors = [call.get(kind, key) if key is not None else call.sole(kind) for call in self.calls]
        return torch.stack(tensors, dim=dim)

    def only_call(self, what: str) -> Call:
        """The single call of this site, or a clear error when there are none or several.

        Args:
            what: the kind or shortcut being read, named in the error message.

        Returns:
            The one ``Call`` of the site.

        Raises:
            NotCapturedError: the site was never called inside the capture.
            AmbiguousCallError: it was called several times.
        """
        if len(self.calls) == 1:
            return self.calls[0]
        if not self.calls:
            reason = self.missing.get("call", "it was not called inside the capture")
            raise NotCapturedError(f"no {what} for {self.name!r}: {reason}")
        raise AmbiguousCallError(
            f"{self.name!r} was called {len(self.calls)} times, so .{what} would have to pick one; "
            f"use cap[{self.name!r}].calls[k].{what} for one call "
            f"or cap[{self.name!r}].stack({what!r}) for all of them"
        )

    def first(self, kind: Kind) -> Tensor:
        """The first tensor of ``kind`` of the only call.

        Args:
            kind: the kind asked for.

        Returns:
            The first stored tensor of ``kind`` in the site's only call.

        Raises:
            NotCapturedError: no call, or nothing held for ``kind``.
            AmbiguousCallError: the site was called several times.
        """
        return self.only_call(kind).get(kind)

    def value_of(self, kind: Kind) -> Any:
        """``kind`` of the only call, in the module's structure (what the shortcuts return).

        Args:
            kind: the kind asked for.

        Returns:
            The only call's value of ``kind``, in the module's structure (see ``Call.value_of``).

        Raises:
            NotCapturedError: no call, or nothing held for ``kind``.
            AmbiguousCallError: the site was called several times.
        """
        return self.only_call(kind).value_of(kind)

    @property
    def param_grad(self) -> dict[str, Tensor]:
        """``{name: grad}`` of the parameters that received exactly one backward pass."""
        if not any(self.param_grads.values()):
            reason = self.missing.get("param_grad", "it was not captured; pass kinds=(..., 'param_grad')")
            raise NotCapturedError(f"no param_grad for {self.name!r}: {reason}")
        several = {n: len(g) for n, g in self.param_grads.items() if len(g) != 1}
        if several:
            raise AmbiguousCallError(
                f"parameters of {self.name!r} received several backward passes ({several}); "
                f"use cap[{self.name!r}].param_grads[name][k]"
            )
        return {name: grads[0] for name, grads in self.param_grads.items() if grads}


def forward_order(sites: Mapping[str, Record]) -> list[Record]:
    """The sites in the order their first call returned; sites never called last, in capture order."""
    # the sort is stable: ties (never called) keep the capture's site order
    return sorted(sites.values(), key=lambda r: r.calls[0].order if r.calls else math.inf)


def _one_kind(kind: Kind, kept: Tensor | None) -> dict[str, dict[str, Tensor]]:
    """The containers of a call that returned one tensor: ``{kind: {"out": kept}}`` (``{}`` when a
    reducer kept nothing). The hook files ``(kind, kept)`` and this builds them when first read."""
    return {kind: {} if kept is None else {"out": kept}}


def _has_tensors(layout: Layout) -> bool:
    if isinstance(layout, Leaf):
        return True
    return isinstance(layout, Node) and any(_has_tensors(child) for child in layout.children)


def _describe(tensors: dict[str, Tensor]) -> str:
    return ", ".join(f"{key} {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for key, t in tensors.items())
