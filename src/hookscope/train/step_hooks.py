"""The module hooks of one logged step of a watch, and what they gather: ``StepHooks``.

``arm()`` puts a forward hook on every watched site (and a tensor hook on each output that needs a
gradient) for the step about to run; ``gathered`` then holds a ``collect.Gathered`` per site;
``disarm()`` removes every hook and hands the sums over when the step ends. Between logged steps
nothing is registered, so the model runs bare. A ``torch.compile``d model, or any once torch.compile
is in use (a compiled train-step function calls the model), runs eagerly while the hooks are on
(hooks added after compiling fire only in eager code: ``core.compiled.run_eagerly``), and the hooks
are out of Dynamo's trace (``core.compiled.out_of_trace``).
Evaluation passes (no grad) and checkpointing's rerun of a call (``core.phase``) are not counted.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..core.compiled import dynamo_loaded, is_compiled, out_of_trace, run_eagerly
from ..core.hooks import HandleGroup
from ..core.phase import call_phase
from ..core.placement import local, shard_note
from ..errors import CaptureWarning
from .collect import Gathered
from .measures import unit_dim
from .sites import output_tensors


class StepHooks:
    """The hooks of the logged step running now on ``sites``; ``touch`` is called at each counted forward call."""

    def __init__(self, model: nn.Module, sites: list[tuple[str, nn.Module]], touch: Callable[[], None]) -> None:
        self.model, self.sites, self._touch = model, sites, touch
        self.gathered: dict[str, Gathered] | None = None  # while a logged step runs
        self._hooks = HandleGroup()
        self._eager = contextlib.ExitStack()
        self._sharded: set[str] = set()  # sites already looked at for a tensor-parallel shard
        self._keep, self._rank = False, 0

    def arm(self, *, keep: bool, rank: int) -> None:
        """Hooks on every site; ``keep``: the last output and gradient too (TensorBoard's histograms)."""
        self._keep, self._rank = keep, rank
        self.restart()
        if is_compiled(self.model) or dynamo_loaded():
            self._eager.enter_context(run_eagerly())
        for name, module in self.sites:
            self._hooks.on_forward(module, out_of_trace(self._forward_hook(name)))

    def restart(self) -> None:
        """Drop what was gathered so far (the scaler skipped the step: it is run again)."""
        self.gathered = {name: Gathered() for name, _ in self.sites}

    def disarm(self) -> dict[str, Gathered] | None:
        """Remove every hook; return what the step gathered (None when no logged step was running)."""
        gathered, self.gathered = self.gathered, None
        try:
            self._hooks.remove()
        finally:
            self._eager.close()
        return gathered

    def _forward_hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not torch.is_grad_enabled() or self.gathered is None:  # an evaluation pass
                return
            if not call_phase().carries_grad:  # checkpointing's rerun of a call already counted (core.phase)
                return
            self._touch()
            x = next((t for t in output_tensors(output) if t.is_floating_point()), None)
            if x is None:
                return
            if name not in self._sharded:  # once per site: is its output a tensor-parallel piece
                self._sharded.add(name)
                if note := shard_note(name, module, x, self._rank):
                    warnings.warn(f"hookscope.train.watch: {note}; its statistics are merged over the ranks",
                                  CaptureWarning, stacklevel=2)  # fmt: skip
            gathered, keep = self.gathered[name], self._keep
            gathered.add_output(local(x), unit_dim(module, x), keep=keep)
            if x.requires_grad:
                self._hooks.on_grad(x, lambda grad: gathered.add_grad_output(grad, keep=keep))

        return hook
