"""``watch(..., sinks=["tensorboard:runs/x"])``: the logged steps through ``torch.utils.tensorboard.SummaryWriter``.

A sink (``train.sinks``): per module and logged step every statistic as a scalar
(``{module}/{column}``, e.g. ``conv1/grad_norm``), the scalars of ``w.log`` by their names, each
alert as text (``alerts``), and histograms of its output (``{module}/output``), output gradient
(``{module}/grad_output``), parameter gradients (``{module}/grad/{param}``) and weights
(``{module}/weight/{param}``). The histograms need copies of those tensors on the host, so a
logged step costs more with TensorBoard than without it; the steps in between cost the same.
Under torchrun rank 0 writes it: the scalars are the merged ones, the histograms its own pieces.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from torch import Tensor

from ..base.optional import require
from ..core.placement import local
from ..store.history import Alert
from .collect import Gathered


class Board:
    """A ``SummaryWriter`` writing to ``logdir``: ``scalars``, ``alert``, ``histograms`` of a logged step, ``close``."""

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        writer = require("torch.utils.tensorboard").SummaryWriter
        self._writer = writer(log_dir=str(logdir))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        for tag, value in values.items():
            if math.isfinite(value):
                self._writer.add_scalar(tag, value, step)

    def alert(self, alert: Alert) -> None:
        self._writer.add_text("alerts", str(alert), alert.step)

    def histograms(self, step: int, name: str, gathered: Gathered, params: Mapping[str, Tensor]) -> None:
        pictures = {"output": gathered.last_output, "grad_output": gathered.last_grad_output}
        pictures.update({f"grad/{p}": g for p, g in gathered.grads.items()})
        pictures.update({f"weight/{p}": w.detach() for p, w in params.items()})
        for what, tensor in pictures.items():
            piece = None if tensor is None else local(tensor)  # of a DTensor: this rank's piece, no collective
            if piece is not None and piece.numel() and bool(piece.isfinite().all()):
                self._writer.add_histogram(f"{name}/{what}", piece.float().cpu(), step)

    def close(self) -> None:
        self._writer.close()
