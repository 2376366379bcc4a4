"""Training steps counted: ``StepClock``, driven by ``clock.step()`` or by the optimizers' step hooks.

::

    clock = StepClock(optimizers, on_end=flush)
    clock.install(handles)        # step hooks on each optimizer, in the block's HandleGroup (core.block)
    ...                           # clock.step_index: the step being run

The rule (no step is counted twice):

- Each ``clock.step()`` ends the step being run.
- With optimizers and no ``clock.step()`` call yet, a step ends when every optimizer has stepped
  once since the last end (one optimizer: each ``optimizer.step()``), seen by its step post-hook
  (``Optimizer.register_step_post_hook``). A ``GradScaler`` that skips ``optimizer.step()`` for an
  inf gradient skips the hook too: that step is not counted.
- The first ``clock.step()`` hands the count over to the caller for good: when the optimizers
  have just ended the step (nothing ran since), it ends nothing more, so a loop that calls both
  ``opt.step()`` and ``clock.step()`` counts each step once.

``on_pre_optimizer(optimizer)`` and ``on_post_optimizer(optimizer)`` run in the optimizer's
pre- and post-step hooks (``ends_step(optimizer)`` False: that call is one part of an optimizer step,
as DeepSpeed's ZeRO steps its torch optimizer once per parameter group), ``on_end(step)`` when a
step ends; ``touch()`` tells the clock that work happened (a forward pass), so that a later
``clock.step()`` is not mistaken for a repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch.optim import Optimizer

from ..core.compiled import out_of_trace
from ..core.hooks import HandleGroup
from ..errors import OptionError

OptimizerHook = Callable[[Optimizer], None]


def optimizers_of(optimizer: Optimizer | Iterable[Optimizer] | None) -> list[Optimizer]:
    """``None``, one optimizer or several, as a list, each unwrapped (``unwrap_optimizer``)."""
    if optimizer is None:
        return []
    one = isinstance(optimizer, (Optimizer, str)) or _wraps(optimizer) or not isinstance(optimizer, Iterable)
    found: list[object] = [optimizer] if one else list(optimizer)  # type: ignore[arg-type]
    return [unwrap_optimizer(o) for o in found]


def unwrap_optimizer(optimizer: object) -> Optimizer:
    """The ``torch.optim.Optimizer`` with step hooks inside a framework's wrapper, or an ``OptionError``.

    Accelerate's ``AcceleratedOptimizer`` passes ``isinstance(o, Optimizer)`` but never ran
    ``Optimizer.__init__`` (no step hooks); it and Lightning's ``LightningOptimizer`` hold the torch
    optimizer as ``.optimizer`` or ``._optimizer``, and step it once per optimizer step.
    """
    found = optimizer
    for _ in range(8):  # wrappers of wrappers
        if isinstance(found, Optimizer) and hasattr(found, "_optimizer_step_pre_hooks"):
            return found
        inner = _inner(found)
        if inner is None:
            break
        found = inner
    raise OptionError(
        f"optimizer= takes a torch.optim.Optimizer (or a wrapper holding one as .optimizer), got "
        f"{type(optimizer).__name__}, which has no step hooks; count steps by hand: pass optimizer=None and call "
        "w.step() after each optimizer step"
    )


def _inner(wrapper: object) -> object | None:
    inner = getattr(wrapper, "optimizer", None) or getattr(wrapper, "_optimizer", None)
    return None if inner is wrapper else inner


def _wraps(optimizer: object) -> bool:
    return isinstance(_inner(optimizer), Optimizer)


class StepClock:
    """The index of the step being run, ended by ``step()`` or by the optimizers (see the module docstring)."""

    def __init__(
        self,
        optimizers: Sequence[Optimizer] = (),
        *,
        on_end: Callable[[int], None] | None = None,
        on_pre_optimizer: OptimizerHook | None = None,
        on_post_optimizer: OptimizerHook | None = None,
        ends_step: Callable[[Optimizer], bool] | None = None,
    ) -> None:
        self.optimizers = list(optimizers)
        self._ends_step = ends_step  # False while an optimizer's step is one part of several (DeepSpeed's groups)
        self.step_index = 0  # the step being run; steps 0 .. step_index - 1 have ended
        self.manual = False  # the caller's step() drives the count
        self._on_end, self._on_pre, self._on_post = on_end, on_pre_optimizer, on_post_optimizer
        self._stepped: set[int] = set()  # ids of the optimizers that stepped in this step
        self._just_ended = False  # the optimizers ended a step and nothing ran since
        self.closure = False  # the optimizer stepping now runs a closure (forward and backward) inside step()

    def install(self, handles: HandleGroup) -> None:
        """A step pre- and post-hook on each optimizer, in ``handles`` (the block removes them)."""
        for optimizer in self.optimizers:  # a compiled train step calls them, Dynamo does not trace them
            handles.on_optimizer_step_pre(optimizer, out_of_trace(self._pre))
            handles.on_optimizer_step_post(optimizer, out_of_trace(self._post))

    def touch(self) -> None:
        """Work happened in the current step (a forward or backward pass)."""
        self._just_ended = False

    def step(self) -> int:
        """End the step being run (the caller's call); returns the index of the next one."""
        first, self.manual = not self.manual, True
        if not (first and self._just_ended):
            self._end()
        self._just_ended = False
        return self.step_index

    def _pre(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        # torch calls the hook with args = (optimizer, *step's args): a closure is args[1] or kwargs["closure"]
        self.closure = (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None
        if self._on_pre is not None:
            self._on_pre(optimizer)

    def _post(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        if self._on_post is not None:
            self._on_post(optimizer)
        if self.manual or (self._ends_step is not None and not self._ends_step(optimizer)):
            return
        self._stepped.add(id(optimizer))
        if len(self._stepped) == len(self.optimizers):
            self._end()
            self._just_ended = True

    def _end(self) -> None:
        ended, self.step_index = self.step_index, self.step_index + 1
        self._stepped.clear()
        if self._on_end is not None:
            self._on_end(ended)
