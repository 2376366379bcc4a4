"""One call of a site: its tensors by kind and key, and why any kind is empty (``Call``).

A call holds its tensors by kind and key (``call.tensors[kind][key]``); the kinds are the rows of
``hookscope.core.kinds`` (``input``, ``output``, ``grad_input``, ``grad_output`` per call;
``param_grad`` per site, in ``Record.param_grads``: ``hookscope.core.records``).

Shortcuts (``.input``, ``.output``, ``.grad_input``, ``.grad_output``, ``.value``, ``.grad``)
return the value *in the module's own structure* (``value_of``): a tensor for a module that
returned a tensor, the same tuple, dict, namedtuple, dataclass or ``ModelOutput`` for one that
returned that (``hookscope.core.tree.rebuild`` says what happens to a class that cannot be
rebuilt), with its non-tensor leaves as returned. ``.input`` is the one argument when the module
was called with one positional argument and no keyword, else ``Arguments(args, kwargs)``.
A gradient kind has the same structure, with None where a tensor received no gradient.
The flat, keyed access stays: ``call.keys(kind)``, ``call.get(kind, key)`` (the first tensor
without a key).

A call is a *logical* call: activation checkpointing's recomputation of it is not another one
(``hookscope.core.phase``). A gradient that reached a tensor in several backward passes through
the same call is summed, as ``Tensor.grad`` would be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

from torch import Tensor

from ..base.display import Shows, plot_of
from ..errors import AmbiguousCallError, NotCapturedError
from . import kinds
from .kinds import Kind
from .tree import Arguments, Layout, Leaf, Node, rebuild

if TYPE_CHECKING:
    from PIL.Image import Image


class _Shortcut:
    """``site.output`` and friends: ``site.value_of(kind)``."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    @overload
    def __get__(self, obj: None, owner: type) -> _Shortcut: ...
    @overload
    def __get__(self, obj: Shortcuts, owner: type) -> Any: ...
    def __get__(self, obj: Shortcuts | None, owner: type) -> Any:
        return self if obj is None else obj.value_of(self.kind)


class Shortcuts:
    """The shortcuts shared by ``Call`` and ``Record``: each kind's value, in its structure."""

    input = _Shortcut("input")
    output = _Shortcut("output")
    grad_input = _Shortcut("grad_input")
    grad_output = _Shortcut("grad_output")
    value = output  # a tap's tensor
    grad = grad_output  # a tap's gradient

    def value_of(self, kind: Kind) -> Any:
        """``kind`` in the module's structure (each subclass says from which call).

        Args:
            kind: the kind asked for.

        Returns:
            The value of ``kind``.
        """
        raise NotImplementedError


class Call(Shortcuts, Shows):
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

    @classmethod
    def returned(cls, site: str, index: int, order: int, kind: Kind, kept: Tensor | None) -> Call:
        """The call of a site that returned one tensor and keeps one kind of it (``kept``, None when a
        reducer kept nothing); its ``tensors`` (``{kind: {"out": kept}}``) are built when first read.

        Args:
            site: the name of the site that was called.
            index: the k-th call of this site inside the capture.
            order: the call's position among all calls of the capture, in the order they returned.
            kind: the one kind kept (``output``, ...).
            kept: the stored tensor, or None.

        Returns:
            The ``Call``.
        """
        call = cls(site, index)
        call.order, call._one = order, (kind, kept)
        return call

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
