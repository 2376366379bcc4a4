"""One lifecycle for every hook block: ``capture``, ``edit``, ``nan_guard``, ``watch``, the recorders.

::

    class Counter(Block):
        noun, remake = "counter", "Counter(model)"

        def _install(self, handles: HandleGroup) -> None:    # every hook goes through handles
            handles.on_forward(self.model, self._count)

A block is entered once: ``new -> active -> closed``; a second ``__enter__`` raises ``BlockError``
naming the block and how to make a new one. ``__enter__`` runs ``_install(handles)`` inside a
``try`` whose ``except BaseException`` removes every handle installed so far and re-raises, so an
entry that fails half-way (a ``torch.jit.script``ed submodule refuses hooks, a warning turned
error, Ctrl-C) leaves nothing on the model or its optimizers. A block of a compiled model opens
its ``Eagerly`` stance last, inside the same ``try``.

``__exit__`` removes every handle and closes the stance first, then ``_release()`` (the
subclass's own state), each in the ``finally`` of the one before, then ``_finish(exc)`` in the
``finally`` of them all: what the block checks or writes at the end runs with every hook already
gone, so nothing it raises can leave one behind. No exception is swallowed. Modelled on
zennit's ``CompositeContext`` and ``RemovableHandleList``.
"""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar, Literal, TypeVar

from ..errors import BlockError
from .compiled import Eagerly
from .hooks import HandleGroup

State = Literal["new", "active", "closed"]
B = TypeVar("B", bound="Block")


class Block:
    """A hook block's lifecycle; subclasses write ``_install`` and, if they need them, ``_release``
    and ``_finish`` (see the module docstring)."""

    noun: ClassVar[str] = "hook block"  # what the BlockError calls it: "capture", "edit block"...
    remake: ClassVar[str] = "a new block"  # how to make a new one: "hookscope.capture(...)"

    def __init__(self, eager: Eagerly | None = None) -> None:
        self._handles = HandleGroup()
        self._eager = eager  # the compiled-model stance, for a block that runs a compiled model eagerly
        self._state: State = "new"

    @property
    def state(self) -> State:
        """``"new"`` before the block, ``"active"`` inside it, ``"closed"`` after it (or a failed entry)."""
        return self._state

    def __enter__(self: B) -> B:
        if self._state != "new":
            done = "is open" if self._state == "active" else "was already used"
            raise BlockError(f"this {self.noun} {done}; a block is entered once: make a new one with {self.remake}")
        try:
            self._install(self._handles)
            if self._eager is not None:
                self._eager.open()  # last: a warning turned error still undoes every hook
        except BaseException:
            self._close()
            raise
        self._state = "active"
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._close()
        finally:
            self._finish(exc)

    def _close(self) -> None:
        """Every handle removed, the stance closed, the subclass's state released; twice is a no-op."""
        try:
            self._handles.remove()
        finally:
            try:
                if self._eager is not None:
                    self._eager.close()  # the compiled code runs again
            finally:
                self._state = "closed"
                self._release()

    def _install(self, handles: HandleGroup) -> None:
        """Install every hook of the block through ``handles``; raising undoes all of them."""
        raise NotImplementedError

    def _release(self) -> None:
        """Let go of what the block holds besides its handles (after a failed entry too)."""

    def _finish(self, exc: BaseException | None) -> None:
        """What the block does once its hooks are gone: check, warn, write (``exc``: what ended it)."""
