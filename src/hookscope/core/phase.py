"""Which phase a module call runs in: the forward pass, or activation checkpointing running it again.

``torch.utils.checkpoint`` runs the modules of a checkpointed region twice. Non-reentrant
(``use_reentrant=False``, the default, ``checkpoint_wrapper``): the forward pass builds the graph
but saves no activation, and the backward pass recomputes the region to get them back. Reentrant
(``use_reentrant=True``, Hugging Face's ``gradient_checkpointing_enable()``): a first pass under
no_grad inside ``CheckpointFunction.forward``, then a recomputation with gradients inside its
``backward``, whose graph the gradients flow through. Either way the second run is the same
*logical* call, not a new one: ``call_phase()`` tells them apart, ``Regions`` finds the call a
recomputation repeats.

::

    phase = call_phase()            # in a hook
    phase.phase                     # "forward", "first_pass" (reentrant, no_grad) or "recompute"
    phase.region                    # the checkpoint's own object (its frame or its autograd ctx); None outside

The signals are torch's: the innermost saved-tensors hook is checkpoint's ``_checkpoint_hook``
(non-reentrant forward) or ``_recomputation_hook`` (its recomputation), each holding the region's
``_CheckpointFrame``; a call under no_grad or inside a backward pass (``_current_graph_task_id()``
is not -1) whose stack holds ``CheckpointFunction.forward`` or ``.backward`` runs in a reentrant
region (its ``ctx``); under no_grad the stack is searched only inside an ``autograd.Function``'s
forward, where torch has turned forward-mode AD off (a plain no_grad pass costs a few C calls).
Any other call, in a backward pass or not, is an ordinary forward call.
"""

from __future__ import annotations

import inspect
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import torch
from torch.utils.checkpoint import CheckpointFunction

Phase = Literal["forward", "first_pass", "recompute"]
T = TypeVar("T")

_FORWARD_CODE = CheckpointFunction.forward.__code__
_BACKWARD_CODE = CheckpointFunction.backward.__code__
_FORWARD_HOOK = "_checkpoint_hook.__init__.<locals>.pack_hook"
_RECOMPUTE_HOOK = "_recomputation_hook.__init__.<locals>.pack_hook"
STOP_RECOMPUTATION = "_StopRecomputationError"  # how checkpoint ends a recomputation early (not a failure)


@dataclass(frozen=True)
class CallPhase:
    """Where a call runs: its ``phase``, the checkpoint ``region`` (None outside one) and the
    backward pass (``backward``, torch's graph task id; -1 outside one)."""

    phase: Phase
    region: object | None = None
    backward: int = -1
    reentrant: bool = False  # the region is a reentrant checkpoint's: gradients flow through its recomputation

    @property
    def repeat(self) -> bool:
        """A recomputation of a call already made (it is not a new call)."""
        return self.phase == "recompute" and self.region is not None

    @property
    def carries_grad(self) -> bool:
        """Do gradients flow through the tensors of this call? The forward pass's do, a reentrant
        recomputation's do (not its no_grad first pass), a non-reentrant recomputation's do not."""
        return self.phase == "forward" or (self.phase == "recompute" and self.reentrant)


FORWARD = CallPhase("forward")

# read on every hooked call: bound once (each is one C call)
_interpreter = torch._C._functorch.peek_interpreter_stack
_graph_task = torch._C._current_graph_task_id
_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_grad_enabled, _fwd_grad_enabled = torch.is_grad_enabled, torch._C._is_fwd_grad_enabled
_inference_mode = torch.is_inference_mode_enabled


def ordinary() -> bool:
    """True for the common call, at a few C calls' cost: no ``torch.func`` transform runs
    (``inference.transform()`` is None), no backward pass, no saved-tensors hooks and not an
    ``autograd.Function``'s forward under no_grad, so ``call_phase()`` is ``FORWARD``. False says
    nothing: the caller asks ``call_phase()`` and ``transform()`` themselves."""
    return (
        _interpreter() is None
        and _graph_task() == -1
        and _saved_hooks(False) is None
        and (_grad_enabled() or _fwd_grad_enabled() or _inference_mode())
    )


def call_phase() -> CallPhase:
    """The phase of the module call running now (see the module doc)."""
    task = torch._C._current_graph_task_id()
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if hooks is not None:
        pack = inspect.unwrap(hooks[0])
        name = getattr(pack, "__qualname__", "")
        if name == _FORWARD_HOOK:
            return CallPhase("forward", _closure(pack, "frame"), task)
        if name == _RECOMPUTE_HOOK:
            ref = _closure(pack, "target_frame_ref")
            return CallPhase("recompute", ref() if callable(ref) else None, task)
    if task != -1:
        ctx = _reentrant_ctx(_BACKWARD_CODE)
        return FORWARD if ctx is None else CallPhase("recompute", ctx, task, reentrant=True)
    if not torch.is_grad_enabled() and _in_function_forward():
        ctx = _reentrant_ctx(_FORWARD_CODE)
        if ctx is not None:
            return CallPhase("first_pass", ctx, reentrant=True)
    return FORWARD


def _in_function_forward() -> bool:
    """Inside an ``autograd.Function``'s forward (torch turns forward-mode AD off there, and nowhere
    else but inference_mode): the cheap test before the stack is searched for ``CheckpointFunction``."""
    return not torch._C._is_fwd_grad_enabled() and not torch.is_inference_mode_enabled()


def _closure(func: Any, name: str) -> Any:
    """The value of the free variable ``name`` of ``func`` (None if it has none)."""
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None)
    if code is None or cells is None or name not in code.co_freevars:
        return None
    return cells[code.co_freevars.index(name)].cell_contents


def _reentrant_ctx(code: Any) -> Any:
    """The ``ctx`` of the innermost ``CheckpointFunction`` method with ``code`` on the stack, or None."""
    frame: Any = sys._getframe()
    while frame is not None:
        if frame.f_code is code:
            return frame.f_locals.get("ctx")
        frame = frame.f_back
    return None


class Regions(Generic[T]):
    """The logical calls made in each checkpoint region, so a recomputation finds the one it repeats.

    ``note(phase, site, item)`` files a forward (or first-pass) call; ``match(phase, site)`` returns
    the item of the k-th call of ``site`` in the region for its k-th recomputation in one backward
    pass (None when there is none). Regions are held weakly: they go with their graph.
    """

    def __init__(self) -> None:
        self._calls: weakref.WeakKeyDictionary[Any, dict[str, list[T]]] = weakref.WeakKeyDictionary()
        self._replays: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], int]] = weakref.WeakKeyDictionary()

    def note(self, phase: CallPhase, site: str, item: T) -> None:
        if phase.region is not None:
            self._calls.setdefault(phase.region, {}).setdefault(site, []).append(item)

    def match(self, phase: CallPhase, site: str) -> T | None:
        calls = self._calls.get(phase.region, {}).get(site, [])
        replays = self._replays.setdefault(phase.region, {})
        k = replays.get((phase.backward, site), 0)
        replays[(phase.backward, site)] = k + 1
        return calls[k] if k < len(calls) else None

    def replayed(self, region: Any) -> bool:
        """Has a backward pass recomputed ``region`` (or is it gone with its graph)?"""
        if region in self._replays:
            return True
        done: dict[Any, bool] = getattr(region, "is_recomputed", None) or {}  # non-reentrant: may stop early
        return any(done.values())

    def clear(self) -> None:
        self._calls.clear()
        self._replays.clear()


def stopped(raised: BaseException | None) -> bool:
    """Is ``raised`` checkpoint's early stop of a recomputation (which is no failure of the module)?"""
    return raised is not None and type(raised).__name__ == STOP_RECOMPUTATION
