"""``HookscopeCallback`` for the Hugging Face ``Trainer`` (TRL's trainers are Trainers).

::

    from hookscope.integrations import HookscopeCallback
    trainer = Trainer(model, args, train_dataset=ds,
                      callbacks=[HookscopeCallback(every=50, nan_guard=True, out="runs/exp1.hookscope")])
    trainer.train()
    trainer.callback_handler.callbacks[-1].watch.alerts    # or keep the callback you made

When training begins it opens ``watch`` (and ``nan_guard``) on the Trainer's model with the torch
optimizer inside Accelerate's wrapper and the Trainer's ``GradScaler`` if it has one; the watch
counts optimizer steps (one per ``gradient_accumulation_steps`` micro-batches, as
``state.global_step``). Each time the Trainer logs (``logging_steps``), its ``loss`` and
``learning_rate`` go to ``w.log`` at the step they were logged for, and the watch's alerts go
back into the Trainer's logs: ``hookscope/alerts`` (their count) and, for each alert raised since
the last log, ``hookscope/{kind}/{module}`` (the value that crossed its bound), in the logs the
callbacks after this one get and in the entry just added to ``trainer.state.log_history`` (its
``step`` is the Trainer's: the watch's step + 1), which ``trainer_state.json`` keeps. The Trainer
puts the trackers of ``report_to`` before the callbacks it is given, so they run before this one
sees the logs: to send the alerts to a tracker, give the callback ``sinks=`` (``"wandb:online"``,
``"tensorboard:DIR"``: ``hookscope.train.sinks``) or move it first
(``trainer.callback_handler.callbacks.insert(0, trainer.pop_callback(callback))``). When training
ends the blocks close; a forward pass that raises closes them too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..base.optional import require
from ..train.watch import Watch
from .session import Options, Session

TrainerCallback: Any = require("transformers").TrainerCallback
LOGGED = {"loss": "loss", "learning_rate": "lr", "grad_norm": "trainer_grad_norm"}  # Trainer's name -> w.log's


class HookscopeCallback(TrainerCallback):  # type: ignore[misc]
    """Runs ``hookscope.watch`` (and ``nan_guard``) during ``Trainer.train`` (see the module docstring).

    Args:
        every: log one optimizer step in this many.
        select: the modules watched; None takes ``watch``'s default sites.
        out: a store folder written when training ends; None writes none.
        sinks: trackers as ``"KIND:WHERE"`` (``"tensorboard:runs/tb"``); None adds none.
        thresholds: the alert bounds: a ``Thresholds``, a dict of the fields to change, or None.
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        nan_guard: also run ``hookscope.nan_guard`` (mode ``raise``) during training.
    """

    def __init__(self, *, every: int = 50, select: Any = None, out: str | os.PathLike[str] | None = None,
                 sinks: Sequence[str] | None = None, thresholds: Any = None, force: bool = False,
                 nan_guard: bool = False) -> None:  # fmt: skip
        self.session = Session(Options(every, select, out, sinks, thresholds, force, nan_guard))
        self._reported = 0  # the watch's alerts already written into the Trainer's logs

    @property
    def watch(self) -> Watch | None:
        """The watch of the last training (its histories, alerts and scalars), ``None`` before one."""
        return self.session.watch

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:  # fmt: skip
        scaler = getattr(getattr(optimizer, "scaler", None), "get_scale", None)
        self.session.open(model, optimizer, scaler=optimizer.scaler if scaler is not None else None)
        self._reported = 0

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        w = self.session.watch
        if w is None or logs is None or self.session.closed:
            return
        values = {ours: logs[theirs] for theirs, ours in LOGGED.items() if isinstance(logs.get(theirs), (int, float))}
        if values:
            w.log(step=max(state.global_step - 1, 0), **values)
        new, self._reported = w.alerts[self._reported :], len(w.alerts)
        entries = {"hookscope/alerts": len(w.alerts), **{f"hookscope/{a.kind}/{a.module}": a.value for a in new}}
        logs.update(entries)
        history = state.log_history
        if history and history[-1].get("step") == state.global_step:  # the entry Trainer.log added for these logs
            history[-1].update(entries)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.close()
