"""What a capture holds: one ``Record`` per site (module or tap), one ``Call`` per call (``core.call``).

A tap (``Capture.tap``) is a site whose ``output`` is the tapped tensor (key ``value``) and
whose ``grad_output`` is its gradient; ``.value`` and ``.grad`` are the same two things.

On a ``Record`` the shortcuts (``.output``, ...) are defined only when the site ran exactly once;
a site called several times raises ``AmbiguousCallError`` instead of silently picking a call: use
``.calls[k]``, ``.values(kind)`` or ``.stack(kind)``.

The calls of a record are read as ``record.calls`` and written through its few methods (``add_call``,
``set_calls``). A capture's hooks file the common call (one tensor returned, one kind kept, no
gradient hooked) as a flat row ``(record, order, kind, kept)`` in the capture's ``CallTable``, not as
a ``Call``: most calls of a long loop are never read one by one, a ``Call`` costs more than its row,
and ``Capture.clear()`` then forgets a batch at once instead of site by site. Reading ``calls``
turns the rows filed since into ``Call`` objects, appended to the same list, so a call read twice
is the same object, in call order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..errors import AmbiguousCallError, NotCapturedError
from .call import Call, Shortcuts
from .kinds import Kind

if TYPE_CHECKING:
    from PIL.Image import Image

Label = tuple[str, str, str]  # (site, kind, key): where a kept tensor came from
TableRow = tuple["Record", int, Kind, "Tensor | None"]  # a call filed flat: (record, order, kind, kept)


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


@dataclass(eq=False)
class Record(Shortcuts, Shows):
    """Everything captured at one site (a module or a tap), across all of its calls.

    Attributes:
        name: the site's dotted module name, or the tap's name.
        type: the module's class name, or ``"tap"``.
        kinds: the kinds the capture keeps here.
        param_grads: parameter name -> its gradient after each backward pass (``param_grad``).
        missing: site-wide reasons something is absent (``"param_grad"``, ``"call"``).
        channels: the module's output channels as its weight says (tells ``(B, H, W, C)`` maps
            apart), or None.

    ``calls`` (one ``Call`` per call of the site, in call order) is read-only: the calls are written
    with ``add_call`` and ``set_calls``, or filed in a capture's ``CallTable`` (see the module doc).
    """

    name: str
    type: str  # the module's class name, or "tap"
    kinds: tuple[Kind, ...]
    param_grads: dict[str, list[Tensor]] = field(default_factory=dict)  # name -> one per backward pass
    missing: dict[str, str] = field(default_factory=dict)  # site-wide reasons (param_grad, no call)
    channels: int | None = None  # the module's output channels as its weight says: tells (B, H, W, C) maps
    _calls: list[Call] = field(default_factory=list, init=False, repr=False)  # the calls made so far
    _table: CallTable | None = field(default=None, init=False, repr=False)  # the capture's table, where its hooks file

    @property
    def calls(self) -> list[Call]:
        """One ``Call`` per call of the site, in call order (always the same list: read it, do not write it)."""
        if self._table is not None and self._table.rows:
            self._table.settle()
        return self._calls

    def add_call(self, call: Call) -> None:
        """Append ``call`` (its ``index`` is ``called()``, the number of calls before it).

        Args:
            call: the site's next call.
        """
        if self._table is not None:
            if self._table.rows:
                self._table.settle()
            self._table.made.add(self)
        self._calls.append(call)

    def set_calls(self, calls: list[Call]) -> None:
        """Replace every call with ``calls``, which ``calls`` then is (a store's reader builds them all at once,
        in a list that also names its lost calls).

        Args:
            calls: the site's calls, in call order.
        """
        if self._table is not None and self._table.rows:
            self._table.settle()
        self._calls = calls

    def kept(self) -> list[Tensor]:
        """Every tensor the calls hold, kind and key after kind and key.

        Returns:
            The stored tensors.
        """
        return [t for call in self.calls for t in call.kept()]

    def called(self) -> int:
        """How many times the site was called (``len(calls)``).

        Returns:
            The number of calls.
        """
        return len(self.calls)

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


class CallTable:
    """The calls the hooks of one capture filed flat, every site's in one list (see the module doc).

    ``filer()`` is the ``append`` a hook binds: ``file((record, order, kind, kept))``. Reading a joined
    record's ``calls`` (or adding a ``Call`` to one) first turns every row into a ``Call`` at the end of
    its record's calls (``settle``). ``clear()`` forgets them all at once, at the cost of the calls made,
    not of the sites.
    """

    def __init__(self) -> None:
        self.rows: list[TableRow] = []  # filed, not yet made Call objects
        self.made: set[Record] = set()  # the records holding Call objects

    def join(self, record: Record) -> Record:
        """Let the hooks file calls of ``record`` here.

        Args:
            record: a site of the capture (with no calls yet).

        Returns:
            ``record``.
        """
        record._table = self
        return record

    def filer(self) -> Callable[[TableRow], None]:
        """What a hook files a call with: ``file((record, order, kind, kept))`` (valid across ``clear``).

        Returns:
            The rows' ``append``.
        """
        return self.rows.append

    def settle(self) -> None:
        """Every row made a ``Call`` (``Call.returned``) at the end of its record's calls, in filing order."""
        returned = Call.returned
        for record, order, kind, kept in self.rows:
            calls = record._calls
            calls.append(returned(record.name, len(calls), order, kind, kept))
            self.made.add(record)
        self.rows.clear()

    def kept(self) -> list[Tensor]:
        """Every tensor the calls of the joined records hold (what ``Capture.clear()`` hands back).

        Returns:
            The stored tensors, the rows' without making their calls.
        """
        held = [kept for _, _, _, kept in self.rows if kept is not None]
        return held + [t for record in self.made for call in record._calls for t in call.kept()]

    def clear(self) -> set[Record]:
        """Forget every call of the joined records.

        Returns:
            The records that had calls.
        """
        had = set(map(itemgetter(0), self.rows)) | self.made
        self.rows.clear()
        for record in self.made:
            record._calls.clear()
        self.made = set()
        return had


def forward_order(sites: Mapping[str, Record]) -> list[Record]:
    """The sites in the order their first call returned; sites never called last, in capture order."""
    # the sort is stable: ties (never called) keep the capture's site order
    return sorted(sites.values(), key=lambda r: r.calls[0].order if r.calls else math.inf)
