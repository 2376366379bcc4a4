"""What every framework callback does: ``Session`` opens ``watch`` (and ``nan_guard``) and closes them.

::

    session = Session(Options(every=50, nan_guard=True, out="runs/exp1.hookscope"))
    w = session.open(model, optimizer, scaler=scaler)   # the framework's optimizer, unwrapped
    ...                                                  # the framework trains
    session.close()                                      # at the end of training, or when it raised

``train.steps.unwrap_optimizer`` takes a framework's optimizer wrapper (Accelerate's
``AcceleratedOptimizer``, Lightning's ``LightningOptimizer``) down to the ``torch.optim.Optimizer``
whose step hooks count the steps; such a wrapper steps its optimizer once per optimizer step, not
per micro-batch, so gradient accumulation counts optimizer steps. An optimizer without step hooks
is an ``OptionError`` naming how to count steps by hand. A forward pass that raises closes the
session (a root forward hook that is always called), so no hook stays on the model after a failed run.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..core.hooks import HandleGroup
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
        o, opt = self.options, optimizer  # train.steps.optimizers_of unwraps it
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
