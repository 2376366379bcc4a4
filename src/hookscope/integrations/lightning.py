"""``HookscopeCallback`` for Lightning (``lightning.pytorch``).

::

    from hookscope.integrations.lightning import HookscopeCallback
    trainer = L.Trainer(callbacks=[HookscopeCallback(every=50)], accumulate_grad_batches=4)

When training starts it opens ``watch`` (and ``nan_guard``) on the ``LightningModule`` with the
Trainer's torch optimizers and the ``GradScaler`` of its precision plugin (``"16-mixed"``), so the
watch counts optimizer steps (``trainer.global_step``), not micro-batches. After each optimizer
step the mean loss of its micro-batches and the learning rate go to ``w.log``; after a logged step
every module's gradient norm goes to ``LightningModule.log_dict`` as ``hookscope/{module}/grad_norm``
(so it reaches the Trainer's loggers), with the alert count as ``hookscope/alerts``. The blocks close
when training ends or raises (``on_exception``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import torch

from ..base.optional import require
from ..train.watch import Watch
from .session import Options, Session

Callback: Any = require("lightning.pytorch").Callback


class HookscopeCallback(Callback):  # type: ignore[misc]
    """Runs ``hookscope.watch`` (and ``nan_guard``) during ``Trainer.fit`` (see the module docstring).

    Args:
        every: log one optimizer step in this many.
        select: the modules watched; None takes ``watch``'s default sites.
        out: a store folder written when the fit ends; None writes none.
        sinks: trackers as ``"KIND:WHERE"`` (``"tensorboard:runs/tb"``); None adds none.
        thresholds: the alert bounds: a ``Thresholds``, a dict of the fields to change, or None.
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        nan_guard: also run ``hookscope.nan_guard`` (mode ``raise``) during the fit.
    """

    def __init__(self, *, every: int = 50, select: Any = None, out: str | os.PathLike[str] | None = None,
                 sinks: Sequence[str] | None = None, thresholds: Any = None, force: bool = False,
                 nan_guard: bool = False) -> None:  # fmt: skip
        self.session = Session(Options(every, select, out, sinks, thresholds, force, nan_guard))
        self._step, self._rows = 0, 0  # the optimizer step of the micro-batches in _losses; logged rows sent
        self._losses: list[torch.Tensor] = []

    @property
    def watch(self) -> Watch | None:
        """The watch of the last fit (its histories, alerts and scalars), ``None`` before one."""
        return self.session.watch

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.session.open(pl_module, list(trainer.optimizers), scaler=scaler)
        self._losses, self._rows = [], 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        w = self.session.watch
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if w is None or self.session.closed:
            return
        if isinstance(loss, torch.Tensor):
            self._losses.append(loss.detach())
        if trainer.global_step == self._step:
            return  # a micro-batch: the optimizer has not stepped
        losses, self._losses = self._losses, []
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        w.log(step=self._step, lr=lr, **({"loss": torch.stack(losses).float().mean()} if losses else {}))
        self._send(w, pl_module)

    def _send(self, w: Watch, pl_module: Any) -> None:
        """The last logged row's gradient norms to ``log_dict``, once per logged step."""
        histories = w.histories()
        rows = max((len(h) for h in histories.values()), default=0)
        if rows == self._rows:
            return
        self._rows = rows
        values = {f"hookscope/{n}/grad_norm": h.last()["grad_norm"] for n, h in histories.items() if len(h)}
        values = {k: v for k, v in values.items() if math.isfinite(v)}
        pl_module.log_dict({**values, "hookscope/alerts": float(len(w.alerts))}, on_step=True, on_epoch=False)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.session.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.session.close(exception)
