"""A watch under mixed precision: ``watch(model, opt, scaler=scaler)`` reads a ``torch.amp.GradScaler``.

A GradScaler multiplies the loss by its scale before ``backward``, so every gradient of the
backward pass is ``scale`` times the true one, and when a gradient overflows it skips
``optimizer.step()`` and halves its scale (``scaler.update()``). ``LossScale`` lets the watch see
the true numbers and count a skipped step as skipped:

- the parameter gradients are read in the optimizer's pre-step hook, after ``scaler.step`` has
  run ``unscale_`` (in place), so they are already the true ones; a fused optimizer
  (``_step_supports_amp_scaling``, e.g. ``Adam(fused=True)``) gets them still scaled, with the
  scale as ``optimizer.grad_scale``: the watch divides by it (``fused_scale``);
- the output gradients (``grad_output_norm``) are divided by the scale of the step;
- the scale is read once per forward pass (``look``, one host read, with a scaler only): when it
  fell since the last look, the scaler skipped the step before, which is then no step (the step
  index stays), is added to ``w.skipped`` and to the scalar ``skipped_steps``, and what a logged
  step had gathered of it (the overflowed gradients) is dropped, so it raises no alert.

A fused optimizer steps (and its hooks run) even when the scaler skips: such a step is counted
as a step, and marked in ``w.skipped`` when the fall of the scale is seen.

A DeepSpeed engine is a scaler too (``watch(model_engine, scaler=model_engine)``): its ZeRO
optimizer skips the step of an overflowed gradient (fp16's loss scaling, and bf16's check of the
gradient norm) without stepping the torch optimizer, so no step hook runs, and its loss scale may
not fall (a static bf16 scale, fp16's hysteresis). The engine's own count, ``skipped_steps``, read
once per forward pass, says it instead; the loss scale is its optimizer's ``loss_scale`` (DeepSpeed's
backward multiplies the loss by it).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.optim import Optimizer

from ..errors import OptionError
from .deepspeed_reads import is_engine


class LossScale:
    """The scale of the running step (1.0 without a scaler) and whether the scaler skipped a step."""

    def __init__(self, scaler: Any) -> None:
        self.engine = scaler if is_engine(scaler) else None  # DeepSpeed's: its count of skipped steps
        if scaler is not None and self.engine is None and not callable(getattr(scaler, "is_enabled", None)):
            raise OptionError(f"scaler= takes a torch.amp.GradScaler, got {type(scaler).__name__}; pass the "
                              "scaler your loop calls scaler.scale(loss) on, or the DeepSpeed engine")  # fmt: skip
        self.scaler = scaler if self.engine is not None or (scaler is not None and scaler.is_enabled()) else None
        self.skipped = int(self.engine.skipped_steps) if self.engine is not None else 0
        self.scale = self._read()

    def look(self) -> bool:
        """Read the scale; ``True`` when the scaler skipped a step since the last look (its scale fell, or a
        DeepSpeed engine counted one more skipped step)."""
        if self.scaler is None:
            return False
        scale = self._read()
        fell, self.scale = scale < self.scale, scale
        if self.engine is not None:
            skipped = int(self.engine.skipped_steps)
            fell, self.skipped = skipped > self.skipped, skipped
        return fell

    def _read(self) -> float:
        if self.engine is not None:
            return float(getattr(self.engine.optimizer, "loss_scale", 1.0))
        return float(self.scaler.get_scale()) if self.scaler is not None else 1.0


def fused_scale(optimizer: Optimizer) -> Tensor | None:
    """The scale a ``GradScaler`` hands a fused optimizer while it steps (its gradients are still scaled)."""
    scale = getattr(optimizer, "grad_scale", None)
    return scale if isinstance(scale, Tensor) else None


def unscaled(row: dict[str, float], scale: float) -> dict[str, float]:
    """``row`` with the output-gradient norm of a backward pass of a loss scaled by ``scale`` made true."""
    return row if scale == 1.0 else {**row, "grad_output_norm": row["grad_output_norm"] / scale}
