"""``watch(..., tensorboard="runs/x")``: the logged steps through ``torch.utils.tensorboard.SummaryWriter``.

Per module and logged step: every statistic as a scalar (``{module}/{column}``, e.g.
``conv1/grad_norm``), and histograms of its output (``{module}/output``), output gradient
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

from ..core.placement import local
from ..optional import require
from .collect import Gathered


class Board:
    """A ``SummaryWriter`` writing to ``logdir``; ``log`` each logged row, ``close`` at the end."""

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        writer = require("torch.utils.tensorboard").SummaryWriter
        self._writer = writer(log_dir=str(logdir))

    def log(self, step: int, name: str, row: Mapping[str, float], gathered: Gathered,
            params: Mapping[str, Tensor]) -> None:  # fmt: skip
        for column, value in row.items():
            if column != "step" and math.isfinite(value):
                self._writer.add_scalar(f"{name}/{column}", value, step)
        pictures = {"output": gathered.last_output, "grad_output": gathered.last_grad_output}
        pictures.update({f"grad/{p}": g for p, g in gathered.grads.items()})
        pictures.update({f"weight/{p}": w.detach() for p, w in params.items()})
        for what, tensor in pictures.items():
            piece = None if tensor is None else local(tensor)  # of a DTensor: this rank's piece, no collective
            if piece is not None and piece.numel() and bool(piece.isfinite().all()):
                self._writer.add_histogram(f"{name}/{what}", piece.float().cpu(), step)

    def close(self) -> None:
        self._writer.close()
