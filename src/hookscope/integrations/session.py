"""What every framework callback does: ``Session`` opens ``watch`` (and ``nan_guard``) and closes them.

::

    session = Session(Options(every=50, nan_guard=True, out="runs/exp1.hookscope"))
    w = session.open(model, optimizer, scaler=scaler)   # the framework's optimizer, unwrapped
    ...                                                  # the framework trains
    session.close()                                      # at the end of training, or when it raised

``unwrap_optimizer`` takes a framework's optimizer wrapper (Accelerate's ``AcceleratedOptimizer``
and Lightning's ``LightningOptimizer`` hold the torch optimizer as ``.optimizer`` or
``._optimizer``) down to the ``torch.optim.Optimizer`` whose step hooks count the steps; such a
wrapper steps its optimizer once per optimizer step, not per micro-batch, so gradient accumulation
counts optimizer steps. An optimizer without step hooks is an ``OptionError`` naming how to count
steps by hand. A forward pass that raises closes the session (a root forward hook that is always
called), so no hook stays on the model after a failed run.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.optim import Optimizer

from ..core.hooks import HandleGroup
from ..errors import OptionError
from ..train.guard import nan_guard as open_guard
from ..train.watch import Watch, watch


@dataclass(frozen=True)
class Options:
    """What a callback passes to ``watch`` and whether it runs ``nan_guard``."""

    every: int = 50
    select: Any = None
    out: str | os.PathLike[str] | None = None
    sinks: Sequence[Any] | None = None
    thresholds: Any = None
    force: bool = False
    nan_guard: bool = False


def unwrap_optimizer(optimizer: Any) -> Optimizer:
    """The ``torch.optim.Optimizer`` inside a framework's wrapper (see the module docstring)."""
    found = optimizer
    for _ in range(8):  # wrappers of wrappers
        if isinstance(found, Optimizer) and hasattr(found, "_optimizer_step_pre_hooks"):
            return found
        inner = getattr(found, "optimizer", None) or getattr(found, "_optimizer", None)
        if inner is None or inner is found:
            break
        found = inner
    raise OptionError(
        f"the optimizer {type(optimizer).__name__} has no step hooks (it is no torch.optim.Optimizer, nor wraps one "
        "as .optimizer); count steps by hand: hookscope.watch(model, optimizer=None) and call w.step() after each "
        "optimizer step"
    )


class Session:
    """A ``watch`` (and a ``nan_guard``) opened for a framework's training, closed by ``close``."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.watch: Watch | None = None
        self._stack: contextlib.ExitStack | None = None
        self._root = HandleGroup()

    def open(self, model: nn.Module, optimizer: Any, *, scaler: Any = None, sinks: Sequence[Any] = ()) -> Watch:
        """Enter ``watch`` (and ``nan_guard``) on ``model``; a session still open is closed first."""
        self.close()
        o = self.options
        many = isinstance(optimizer, (list, tuple))
        opt = (
            [unwrap_optimizer(x) for x in optimizer]
            if many
            else None
            if optimizer is None
            else unwrap_optimizer(optimizer)
        )
        stack = contextlib.ExitStack()
        try:
            w = stack.enter_context(watch(model, opt, every=o.every, select=o.select, out=o.out, force=o.force,
                                          thresholds=o.thresholds, sinks=[*(o.sinks or []), *sinks],
                                          scaler=scaler))  # fmt: skip
            if o.nan_guard:
                stack.enter_context(open_guard(model, opt, scaler=scaler))
        except BaseException:
            stack.close()
            raise
        self._stack, self.watch = stack, w
        self._root.on_forward(model, self._failed, always_call=True)
        return w

    @property
    def closed(self) -> bool:
        return self._stack is None

    def close(self, exc: BaseException | None = None) -> None:
        """Leave the blocks (each removes its hooks, the store is written); a no-op when none is open."""
        stack, self._stack = self._stack, None
        self._root.remove()
        if stack is not None:
            stack.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)

    def _failed(self, module: nn.Module, args: Any, output: Any) -> None:
        raised = sys.exc_info()[1]
        if output is None and raised is not None:  # the forward pass is raising: training ends here
            self.close(raised)
