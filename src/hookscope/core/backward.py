"""The gradient side of a capture: hooks on the tensors a call received or returned, and on parameters.

``Capture`` mixes in :class:`GradientHooks`: ``_watch`` hooks the gradient of each tensor of a call
that will receive one (``Tensor.register_hook``, never ``register_full_backward_hook``, which raises
on in-place ops: pytorch/pytorch#61519), or files why it cannot; ``_rewatch`` hooks a reentrant
checkpoint's recomputation, whose graph is the one gradients flow through (``core.phase``). Several
backward passes add up on the same call.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from .call import Call
from .diagnosis import AWAITS_RECOMPUTE, NO_GRAD_MODE, does_not_require_grad
from .hooks import HandleGroup
from .kinds import Kind
from .phase import CallPhase
from .policy import Keeper
from .records import Record
from .tree import Leaves


class GradientHooks:
    """The gradient hooks of a capture, and what they keep (``_keeper``) in its calls and records."""

    _handles: HandleGroup
    _keeper: Keeper
    _grads_seen: bool
    _params_reached: set[str]

    def _rewatch(self, call: Call, grad_kinds: tuple[Kind, ...], leaves: Leaves, what: str) -> None:
        """Hook a reentrant recomputation's tensors: its graph is the one gradients flow through."""
        for kind in grad_kinds:
            if call.missing.get(kind) == AWAITS_RECOMPUTE:
                del call.missing[kind]
            self._watch(call, kind, leaves, what)

    def _watch(self, call: Call, kind: Kind, leaves: Leaves, what: str, phase: CallPhase | None = None) -> None:
        """Hook the gradient of every tensor in ``leaves`` that will receive one."""
        if phase is not None and phase.phase == "first_pass":
            call.missing[kind] = AWAITS_RECOMPUTE  # until the recomputation hooks its tensors (_rewatch)
            return
        if not torch.is_grad_enabled():
            call.missing[kind] = NO_GRAD_MODE
            return
        watched = [(key, t) for key, t in leaves if t.requires_grad]
        if not watched:
            call.missing[kind] = does_not_require_grad(what)
            return
        call.watched[kind] = [key for key, _ in watched]
        for key, tensor in watched:
            self._handles.on_grad(tensor, partial(self._on_grad, call, kind, key))

    def _on_grad(self, call: Call, kind: Kind, key: str, grad: Tensor) -> None:
        self._grads_seen = True
        call.reached.add(kind)
        kept = self._keeper.keep(grad, (call.site, kind, key))
        if kept is None:
            return
        held = call.tensors.setdefault(kind, {})
        if key in held:  # several backward passes: summed, once the copies have landed
            self._keeper.wait()
            held[key] = held[key] + kept
        else:
            held[key] = kept

    def _on_param_grad(self, record: Record, name: str, param: Tensor) -> None:
        self._grads_seen = True
        self._params_reached.add(record.name)
        kept = None if param.grad is None else self._keeper.keep(param.grad, (record.name, "param_grad", name))
        if kept is not None:
            record.param_grads[name].append(kept)
