"""The guard's backward pass: which gradients it watches, who gets each, and when it is read.

A tensor that a checked call received or returned and that needs a gradient gets one tensor hook
(never ``register_full_backward_hook``, which raises on in-place ops, pytorch/pytorch#61519); the
calls that saw it subscribe to its gradient, as ``grad_input`` (they received the tensor) or as
``grad_output`` (they returned it). When it arrives it is handed to them inner calls first: a
block and its first layer share the input whose gradient broke.

A gradient is read at once where it is some call's ``grad_input``: that is where a NaN first
shows. Where it is only ever a ``grad_output`` (what a padding receives from the convolution
around it), the producer rule needs it only if that call's ``grad_input`` is non-finite: with
``sync="call"`` it is held (``Readings.later``) until every ``grad_input`` of the call has
arrived, read then if one of them is non-finite, and dropped unread if none is. The outermost
call's ``grad_output`` (the loss) is always read at once.

A ``pointwise`` module (``finite.pointwise``: ReLU6, Tanh) fed a finite input and sent back a
finite gradient sends back a finite one: when the gradient that reaches its input is that op's
alone (the very tensor its autograd node returned, unchanged: nothing else added to it), it is
taken as finite without reading it (``through``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from torch import Tensor

from ..core.hooks import HandleGroup
from ..core.tree import Leaves
from . import finite
from .producer import Check, Site
from .readings import Readings

Subscriber = tuple[str, Site, str]  # (event, site, key): who gets a gradient when it arrives
See = Callable[[str, Site, list[Check]], None]


class Gradients:
    """The tensor hooks of one guard and the calls that subscribed to each gradient."""

    def __init__(self, handles: HandleGroup, readings: Readings, see: See) -> None:
        self._handles, self._readings, self._see = handles, readings, see
        self._watched: dict[int, tuple[weakref.ref[Tensor], list[Subscriber]]] = {}
        self._sole: dict[int, tuple[Tensor, int]] = {}  # id(subscribers) -> the one gradient sent to them, finite

    def watch(self, site: Site, event: str, leaves: Leaves) -> None:
        """Hand the gradient of each leaf to ``site`` when it arrives (one tensor hook per tensor)."""
        for key, tensor in leaves:
            if not tensor.requires_grad or not finite.checkable(tensor):
                continue
            known = self._watched.get(id(tensor))
            if known is None or known[0]() is not tensor:
                known = (weakref.ref(tensor), [])
                self._watched[id(tensor)] = known
                self._handles.on_grad(tensor, partial(self._on_grad, known[1]))
            known[1].append((event, site, key))
            if event == "grad_input":
                site.awaiting += 1

    def through(self, site: Site, x: Tensor, y: Tensor) -> None:
        """``y``, the output of ``site``'s pointwise op on the finite ``x``: see the module docstring."""
        known = self._watched.get(id(x))
        node = y.grad_fn
        if known is None or known[0]() is not x or y is x or node is None or len(node.next_functions) != 1:
            return
        self._handles.on_node(node, partial(self._sent, site, id(known[1])))

    def _sent(self, site: Site, subscribers: int, grad_inputs: Any, grad_outputs: Any) -> None:
        """The op's node ran: what it sent is finite if what it received is the gradient read finite."""
        grad, came, received = grad_inputs[0], grad_outputs[0], site.grad_outputs
        if grad is None or came is None or len(received) != 1:
            return
        reading = received[0].reading  # the very tensor the node received, unchanged: no later hook rewrote it
        unchanged = reading.version == came._version and reading.ref() is came
        if unchanged and reading.held is None and reading.level == finite.FINITE:
            self._sole[subscribers] = (grad, grad._version)

    def forget(self) -> None:
        """A new forward pass: the tensors of the last one are not looked up again."""
        self._watched.clear()
        self._sole.clear()

    def _on_grad(self, subscribers: list[Subscriber], grad: Tensor) -> None:
        if not finite.checkable(grad):
            return
        sole = self._sole.pop(id(subscribers), None)
        if sole is not None and sole[0] is grad and grad._version == sole[1]:
            reading = self._readings.finite(grad)  # a pointwise op's gradient alone, from a finite one
        elif all(event == "grad_output" and not site.outer and site.awaiting > 0 for event, site, _ in subscribers):
            reading = self._readings.later(grad)  # needed only if a grad_input of these calls breaks
        else:
            reading = self._readings.of(grad)
        for event, site, key in sorted(subscribers, key=lambda s: (s[0] != "grad_input", -s[1].depth)):
            self._see(event, site, [Check(key, reading)])
            if event == "grad_input":
                site.awaiting -= 1
                if site.awaiting == 0:  # its backward is done: what it received and never needed goes
                    site.grad_outputs = [c for c in site.grad_outputs if not c.reading.release()]
