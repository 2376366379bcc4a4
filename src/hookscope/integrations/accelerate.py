"""``watch_accelerate``: ``hookscope.watch`` for a plain Hugging Face Accelerate loop.

::

    from hookscope.integrations.accelerate import watch_accelerate
    model, opt, loader = accelerator.prepare(model, opt, loader)
    with watch_accelerate(model, opt, accelerator, every=50, out="runs/exp1.hookscope") as w:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                w.log(loss=loss, lr=opt.param_groups[0]["lr"])
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()

It watches the unwrapped model (``accelerator.unwrap_model``) with the torch optimizer inside the
``AcceleratedOptimizer``, which steps it once per optimizer step (under ``accelerator.accumulate``
once every ``gradient_accumulation_steps`` micro-batches), and reads the accelerator's
``GradScaler`` (``mixed_precision="fp16"``). Besides the usual sinks, every scalar it logs (the
statistics, the scalars of ``w.log``, ``hookscope/alerts``) goes to ``accelerator.log``, so it
reaches the trackers given to ``Accelerator(log_with=...)``. The model comes first, as in every
hookscope function; the earlier order ``(accelerator, model, optimizer)`` works for one release and warns.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from ..base.deprecation import warn_renamed
from ..store.history import Alert
from ..train.watch import Watch, watch


class AcceleratorSink:
    """A sink (``train.sinks``) that hands everything to ``accelerator.log``.

    Args:
        accelerator: the ``accelerate.Accelerator`` whose ``log`` gets everything.
    """

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator
        self.alerts = 0

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Hand one step's scalars to ``accelerator.log``.

        Args:
            step: the optimizer step they belong to.
            values: name -> value (the statistics, the scalars of ``w.log``).
        """
        self.accelerator.log(dict(values), step=step)

    def alert(self, alert: Alert) -> None:
        """Count the alert and log the count as ``hookscope/alerts`` at its step.

        Args:
            alert: the alert the watch raised.
        """
        self.alerts += 1
        self.accelerator.log({"hookscope/alerts": float(self.alerts)}, step=alert.step)

    def close(self) -> None:
        """The accelerator's trackers are the user's: ``accelerator.end_training()`` ends them."""


def watch_accelerate(model: Any, optimizer: Any, accelerator: Any, *, every: int = 50, select: Any = None,
                     out: str | os.PathLike[str] | None = None, sinks: Sequence[str] | None = None,
                     thresholds: Any = None, force: bool = False) -> Watch:  # fmt: skip
    """A ``watch`` of an Accelerate loop (see the module docstring), to use as ``with watch_accelerate(...) as w``.

    ``model`` and ``optimizer`` as ``accelerator.prepare`` returned them; ``accelerator``: the ``Accelerator``.

    Args:
        model: the model ``accelerator.prepare`` returned; its unwrapped module is watched.
        optimizer: the optimizer ``accelerator.prepare`` returned.
        accelerator: the loop's ``accelerate.Accelerator`` (the earlier order, accelerator first, warns).
        every: log one optimizer step in this many.
        select: the modules watched; None takes ``watch``'s default sites.
        out: a store folder written while the block runs and when it ends; None writes none.
        sinks: more trackers as ``"KIND:WHERE"``; ``accelerator.log`` is always one.
        thresholds: the alert bounds: a ``Thresholds``, a dict of the fields to change, or None.
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).

    Returns:
        A ``Watch`` block.

    Raises:
        OptionError: ``every`` below 1, bad ``thresholds`` or an unknown sink.
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write.
        SelectionError: ``select`` matches no module.
    """
    if _is_accelerator(model) and not _is_accelerator(accelerator):  # the earlier order, for one release
        old, new = "(accelerator, model, optimizer)", "(model, optimizer, accelerator)"
        warn_renamed(f"watch_accelerate{old}", f"watch_accelerate{new}")
        model, optimizer, accelerator = optimizer, accelerator, model
    return watch(accelerator.unwrap_model(model), optimizer, every=every, select=select, out=out, force=force,
                 thresholds=thresholds, sinks=[*(sinks or []), AcceleratorSink(accelerator)],
                 scaler=getattr(accelerator, "scaler", None))  # fmt: skip


def _is_accelerator(obj: Any) -> bool:
    """An ``accelerate.Accelerator`` (or what acts as one): it unwraps models and is not one itself."""
    return callable(getattr(obj, "unwrap_model", None)) and not isinstance(obj, nn.Module)
